package recording

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/andybalholm/brotli"
)

// DefaultMaskReplacement replaces a masked value when a rule names none.
const DefaultMaskReplacement = "***"

// Masker applies masking rules to every payload of a session before it
// leaves the process (RETRACE_MASK). Rules are read from a text file, one
// per line ('#' starts a comment line; blank lines are ignored):
//
//	header NAME [REPLACEMENT]     the value of every HTTP header NAME (any case)
//	json PATH [REPLACEMENT]       the value at PATH in JSON HTTP bodies; a PATH
//	                              of one name ($.name or $..name) also masks the
//	                              form field of that name in form bodies
//	                              (a=b&c=d) and in request query strings
//	regex PATTERN [REPLACEMENT]   every match of PATTERN (RE2 syntax, no spaces:
//	                              write \s or \x20) in every payload; $1… in
//	                              REPLACEMENT expand groups
//	random crypto                 the crypto/rand draws a request made
//	                              (RETRACE_RANDOM=all): removed from the session,
//	                              which is marked masked
//
// REPLACEMENT is the rest of the line (default "***"). PATH is a JSON path:
// $ then any of .name, ['name'], .*, [N], [*] and ..name (name at any
// depth). Examples:
//
//	# tokens
//	header Authorization
//	header Cookie
//	json $..access_token [token]
//	regex (?i)(bearer\s+)[A-Za-z0-9._~+/=-]+ ${1}[token]
//	# phone numbers: keep the last two digits
//	json $.user.phone ***
//	regex \+?\b\d{7,12}(\d\d)\b *******$1
//	# card numbers (13–19 digits, optionally grouped by spaces or dashes)
//	json $.payment.card.number [card]
//	regex \b(?:\d[\s-]?){12,18}\d\b [card]
//
// The header, json and regex rules reach payloads only: the crypto/rand
// draws a session holds (Session.Random) are the raw bytes the request
// drew, before it encoded them (hex, base32, a UUID), and no text rule
// can recognise them there; "random crypto" removes them all. The seed of
// the math/rand sources is kept (math/rand is no source of secrets).
//
// HTTP messages are masked field by field, and Content-Length is fixed (a
// chunked body becomes one chunk) when a body changes length; Redis bulk
// strings and MySQL packets get their length prefixes fixed the same way
// when a regex changes their length. JSON bodies that a rule changed are
// re-encoded compactly with keys in sorted order. A body is JSON when it
// starts with { or [, whatever its Content-Type says. Bodies with a
// Content-Encoding of gzip, deflate or br are decoded, masked and encoded
// again; bodies cut by the payload cap are masked in what is kept (JSON
// token by token); query strings and form values are URL-decoded before
// regex rules see them. What cannot be decoded is kept as it is and
// counted (Stats.MaskSkipped).
type Masker struct {
	headers map[string]string // lower-case header name → replacement
	forms   map[string]string // form field name → replacement
	paths   []pathRule
	regexes []regexRule
	// noCrypto removes the crypto/rand draws of every session ("random crypto")
	noCrypto bool
}

type regexRule struct {
	re   *regexp.Regexp
	repl []byte
}

type pathRule struct {
	segs []pathSeg
	repl string
}

type segKind uint8

const (
	segKey      segKind = iota // .name
	segAnyKey                  // .*
	segIndex                   // [N]
	segAnyIndex                // [*]
	segDescend                 // ..name
)

type pathSeg struct {
	kind  segKind
	name  string
	index int
}

// LoadMasker reads a masking-rules file.
func LoadMasker(path string) (*Masker, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("recording: masking rules: %w", err)
	}
	defer f.Close()
	return ParseMasker(f, path)
}

// ParseMasker reads masking rules from r; name is used in error messages.
func ParseMasker(r io.Reader, name string) (*Masker, error) {
	m := &Masker{headers: map[string]string{}, forms: map[string]string{}}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if err := m.addRule(line); err != nil {
			return nil, fmt.Errorf("recording: masking rules %s:%d: %w", name, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("recording: masking rules %s: %w", name, err)
	}
	return m, nil
}

func (m *Masker) addRule(line string) error {
	kind, rest, _ := strings.Cut(line, " ")
	rest = strings.TrimLeft(rest, " \t")
	arg, repl, _ := strings.Cut(rest, " ")
	if i := strings.IndexByte(arg, '\t'); i >= 0 {
		arg, repl = arg[:i], arg[i+1:]+" "+repl
	}
	repl = strings.TrimSpace(repl)
	if repl == "" {
		repl = DefaultMaskReplacement
	}
	if arg == "" {
		return fmt.Errorf("rule %q names nothing to mask", line)
	}
	switch kind {
	case "header":
		m.headers[strings.ToLower(arg)] = repl
	case "json":
		segs, err := parsePath(arg)
		if err != nil {
			return err
		}
		m.paths = append(m.paths, pathRule{segs: segs, repl: repl})
		if len(segs) == 1 && (segs[0].kind == segKey || segs[0].kind == segDescend) {
			m.forms[segs[0].name] = repl
		}
	case "random":
		if arg != "crypto" || repl != DefaultMaskReplacement {
			return fmt.Errorf("rule %q: want \"random crypto\"", line)
		}
		m.noCrypto = true
	case "regex":
		re, err := regexp.Compile(arg)
		if err != nil {
			return fmt.Errorf("regex %q: %w", arg, err)
		}
		m.regexes = append(m.regexes, regexRule{re: re, repl: []byte(repl)})
	default:
		return fmt.Errorf("unknown rule %q (want header, json, regex or random)", kind)
	}
	return nil
}

func parsePath(p string) ([]pathSeg, error) {
	bad := func(why string) error { return fmt.Errorf("json path %q: %s", p, why) }
	if !strings.HasPrefix(p, "$") {
		return nil, bad("must start with $")
	}
	var segs []pathSeg
	s := p[1:]
	name := func() string {
		i := strings.IndexAny(s, ".[")
		if i < 0 {
			i = len(s)
		}
		n := s[:i]
		s = s[i:]
		return n
	}
	for s != "" {
		switch {
		case strings.HasPrefix(s, ".."):
			s = s[2:]
			n := name()
			if n == "" || n == "*" {
				return nil, bad("'..' needs a name after it")
			}
			segs = append(segs, pathSeg{kind: segDescend, name: n})
		case s[0] == '.':
			s = s[1:]
			n := name()
			switch n {
			case "":
				return nil, bad("empty name after '.'")
			case "*":
				segs = append(segs, pathSeg{kind: segAnyKey})
			default:
				segs = append(segs, pathSeg{kind: segKey, name: n})
			}
		case s[0] == '[':
			end := strings.IndexByte(s, ']')
			if end < 0 {
				return nil, bad("'[' without ']'")
			}
			in := s[1:end]
			s = s[end+1:]
			switch {
			case in == "*":
				segs = append(segs, pathSeg{kind: segAnyIndex})
			case len(in) >= 2 && (in[0] == '\'' || in[0] == '"') && in[len(in)-1] == in[0]:
				segs = append(segs, pathSeg{kind: segKey, name: in[1 : len(in)-1]})
			default:
				n, err := strconv.Atoi(in)
				if err != nil || n < 0 {
					return nil, bad(fmt.Sprintf("[%s] is not an index, * or a quoted name", in))
				}
				segs = append(segs, pathSeg{kind: segIndex, index: n})
			}
		default:
			return nil, bad(fmt.Sprintf("unexpected %q", s))
		}
	}
	if len(segs) == 0 {
		return nil, bad("names no value")
	}
	return segs, nil
}

// MaskSession masks every payload of s in place and reports whether any
// changed.
func (m *Masker) MaskSession(s *Session) bool {
	changed, _, _ := m.maskSession(s)
	return changed
}

// maskSession masks every payload of s in place; skipped counts the
// payloads (or bodies in them) it could not read to mask, kept as they
// are, and why says why for the first.
func (m *Masker) maskSession(s *Session) (changed bool, skipped int, why string) {
	r := maskRun{m: m}
	one := func(proto string, p *[]byte) {
		out := r.mask(proto, *p)
		if !bytes.Equal(out, *p) {
			*p, changed = out, true
		}
	}
	one(s.Inbound.Proto, &s.Inbound.Request)
	one(s.Inbound.Proto, &s.Inbound.Response)
	for i := range s.Calls {
		call := &s.Calls[i]
		one(call.Proto, &call.Request)
		one(call.Proto, &call.Response)
	}
	if rr := s.Random; m != nil && m.noCrypto && rr != nil && len(rr.Crypto) > 0 {
		masked := *rr
		masked.Crypto, masked.Masked = nil, true
		s.Random = &masked
		changed = true
	}
	return changed, r.skipped, r.why
}

// Mask returns p masked as a payload of the protocol ("http", "redis",
// "mysql", anything else is raw bytes) and whether it changed. p itself is
// never modified.
func (m *Masker) Mask(proto string, p []byte) ([]byte, bool) {
	if m == nil || len(p) == 0 {
		return p, false
	}
	r := maskRun{m: m}
	out := r.mask(proto, p)
	if bytes.Equal(out, p) {
		return p, false
	}
	return out, true
}

// maskRun is one masking of a session or payload: it keeps count of what
// could not be masked.
type maskRun struct {
	m       *Masker
	skipped int
	why     string // of the first skip
}

func (r *maskRun) skip(why string) {
	r.skipped++
	if r.why == "" {
		r.why = why
	}
}

func (r *maskRun) mask(proto string, p []byte) []byte {
	if r.m == nil || len(p) == 0 {
		return p
	}
	switch proto {
	case "http":
		return r.http(p)
	case "redis":
		return r.m.maskRESP(p)
	case "mysql":
		return r.m.maskMySQL(p)
	case "http2", "grpc":
		return r.h2(proto, p) // mask_h2.go
	default:
		return r.m.regex(p)
	}
}

func (m *Masker) regex(p []byte) []byte {
	for _, r := range m.regexes {
		p = r.re.ReplaceAll(p, r.repl)
	}
	return p
}

// http masks one HTTP/1.x message and, recursively, any message after it
// in the same payload (interim 1xx responses, pipelined requests).
func (r *maskRun) http(p []byte) []byte {
	m := r.m
	headEnd := bytes.Index(p, []byte("\r\n\r\n"))
	if headEnd < 0 {
		return m.regex(m.maskHead(p, nil)) // a head cut by the payload cap
	}
	var h httpHead
	head := m.maskHead(p[:headEnd+2], &h) // keeps the last header's CRLF
	rest := p[headEnd+4:]
	var body, after []byte
	chunked := false
	switch {
	case h.noBody:
		after = rest
	case h.chunked:
		var ok bool
		body, after, ok = dechunk(rest)
		if !ok { // cut by the cap (or malformed): mask what the chunks hold
			newBody := r.body(body, &h)
			head = m.regex(head)
			if bytes.Equal(newBody, body) {
				return append(append(head, "\r\n"...), m.regex(rest)...)
			}
			out := append(append(head, "\r\n"...), strconv.FormatInt(int64(len(newBody)), 16)+"\r\n"...)
			return append(out, newBody...) // cut as it was: no last chunk
		}
		chunked = true
	case h.contentLength >= 0:
		n := min(int(h.contentLength), len(rest))
		body, after = rest[:n], rest[n:]
	default:
		body = rest
	}
	newBody := r.body(body, &h)
	head = m.regex(head)
	if bytes.Equal(newBody, body) {
		// keep the body's framing as it was recorded
		out := append(append(head, "\r\n"...), rest[:len(rest)-len(after)]...)
		return r.appendAfter(out, after)
	}
	if chunked {
		var cb []byte
		if len(newBody) > 0 {
			cb = append(strconv.AppendInt(cb, int64(len(newBody)), 16), "\r\n"...)
			cb = append(append(cb, newBody...), "\r\n"...)
		}
		newBody = append(cb, "0\r\n\r\n"...)
	} else if len(newBody) != len(body) && h.contentLength >= 0 {
		// the cap may have cut the body: shift the declared length by what
		// masking changed rather than setting it to what we kept.
		head = setContentLength(head, h.contentLength+int64(len(newBody)-len(body)))
	}
	return r.appendAfter(append(append(head, "\r\n"...), newBody...), after)
}

func (r *maskRun) appendAfter(out, after []byte) []byte {
	switch {
	case len(after) == 0:
		return out
	case looksHTTP(after):
		return append(out, r.http(after)...)
	default:
		return append(out, r.m.regex(after)...)
	}
}

// maxDecoded bounds a body decoded for masking (a compression bomb is not
// unpacked beyond it; what it holds past the bound is counted as skipped).
const maxDecoded = 64 << 20

// body masks an HTTP body: decoded first when it has a Content-Encoding
// (gzip, deflate, br), as JSON whenever it is JSON (whatever the
// Content-Type says), field by field when it is a form, then by the regex
// rules; re-encoded when it changed. A body it cannot decode is counted
// and kept as it is.
func (r *maskRun) body(body []byte, h *httpHead) []byte {
	if len(body) == 0 {
		return body
	}
	encs := contentEncodings(h.encoding)
	plain := body
	for i := len(encs) - 1; i >= 0; i-- {
		dec, err := decodeBody(encs[i], plain)
		if dec == nil {
			r.skip(fmt.Sprintf("an HTTP body with Content-Encoding %q: %v", h.encoding, err))
			return body
		}
		if len(dec) > maxDecoded {
			r.skip(fmt.Sprintf("an HTTP body with Content-Encoding %q decodes to more than %d bytes", h.encoding, maxDecoded))
			return body
		}
		plain = dec // a stream the cap cut decodes to what it holds
	}
	masked := r.m.maskPlainBody(plain, h.contentType)
	if len(encs) == 0 || bytes.Equal(masked, plain) {
		if len(encs) == 0 {
			return masked
		}
		return body
	}
	for _, e := range encs {
		masked = encodeBody(e, masked)
	}
	return masked
}

// maskPlainBody masks a body that is not (or no longer) encoded.
func (m *Masker) maskPlainBody(b []byte, contentType string) []byte {
	if looksJSON(b) {
		out, parsed := m.maskJSON(b)
		if !parsed { // cut by the cap, or JSON followed by more: mask what is there
			out = m.maskJSONPrefix(b)
		}
		return m.regex(out)
	}
	if strings.Contains(contentType, "application/x-www-form-urlencoded") {
		return m.regex(m.maskForm(b))
	}
	return m.regex(b)
}

// contentEncodings returns the codings of a Content-Encoding value, in the
// order they were applied, without "identity".
func contentEncodings(v string) []string {
	var out []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" && e != "identity" {
			out = append(out, e)
		}
	}
	return out
}

// decodeBody decodes b of the content coding enc. A stream cut short
// decodes to what it holds (with the error); nil is a body it cannot read.
func decodeBody(enc string, b []byte) ([]byte, error) {
	var rd io.Reader
	var err error
	switch enc {
	case "gzip", "x-gzip":
		rd, err = gzip.NewReader(bytes.NewReader(b))
	case "deflate": // zlib, as HTTP says; raw deflate, as some servers send
		if rd, err = zlib.NewReader(bytes.NewReader(b)); err != nil {
			rd, err = flate.NewReader(bytes.NewReader(b)), nil
		}
	case "br":
		rd = brotli.NewReader(bytes.NewReader(b))
	default:
		return nil, fmt.Errorf("coding %q is not one of gzip, deflate, br", enc)
	}
	if err != nil {
		return nil, err
	}
	out, err := io.ReadAll(io.LimitReader(rd, maxDecoded+1))
	if err != nil && len(out) == 0 {
		return nil, err
	}
	if out == nil {
		out = []byte{}
	}
	return out, err
}

// encodeBody encodes b in the content coding enc (one decodeBody read).
func encodeBody(enc string, b []byte) []byte {
	var out bytes.Buffer
	var w io.WriteCloser
	switch enc {
	case "gzip", "x-gzip":
		w = gzip.NewWriter(&out)
	case "deflate":
		w = zlib.NewWriter(&out)
	case "br":
		w = brotli.NewWriter(&out)
	default:
		return b
	}
	_, _ = w.Write(b) // into memory: cannot fail
	_ = w.Close()
	return out.Bytes()
}

type httpHead struct {
	contentLength int64 // -1 when absent
	chunked       bool
	noBody        bool // 1xx, 204 and 304 responses
	contentType   string
	encoding      string
}

// maskHead masks the start line's query string and the header values of a
// message head (lines ending in CRLF) and fills h.
func (m *Masker) maskHead(head []byte, h *httpHead) []byte {
	if h != nil {
		h.contentLength = -1
	}
	out := make([]byte, 0, len(head))
	for i := 0; len(head) > 0; i++ {
		line := head
		nl := bytes.Index(head, []byte("\r\n"))
		if nl >= 0 {
			line, head = head[:nl], head[nl+2:]
		} else {
			head = nil
		}
		if i == 0 {
			line = m.maskStartLine(line, h)
		} else if name, value, ok := bytes.Cut(line, []byte(":")); ok {
			lname := strings.ToLower(string(bytes.TrimSpace(name)))
			v := strings.TrimSpace(string(value))
			if h != nil {
				switch lname {
				case "content-length":
					if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
						h.contentLength = n
					}
				case "transfer-encoding":
					h.chunked = strings.Contains(strings.ToLower(v), "chunked")
				case "content-type":
					h.contentType = strings.ToLower(v)
				case "content-encoding":
					h.encoding = strings.ToLower(v)
				}
			}
			if repl, ok := m.headers[lname]; ok {
				line = append(append(append([]byte(nil), name...), ": "...), repl...)
			}
		}
		out = append(out, line...)
		if nl >= 0 {
			out = append(out, "\r\n"...)
		}
	}
	return out
}

func (m *Masker) maskStartLine(line []byte, h *httpHead) []byte {
	if bytes.HasPrefix(line, []byte("HTTP/")) {
		if h != nil {
			if f := bytes.Fields(line); len(f) >= 2 {
				code := string(f[1])
				h.noBody = strings.HasPrefix(code, "1") || code == "204" || code == "304"
			}
		}
		return line
	}
	// METHOD TARGET VERSION: mask form fields of the query string
	sp1 := bytes.IndexByte(line, ' ')
	q := bytes.IndexByte(line, '?')
	if sp1 < 0 || q < sp1 || len(m.forms) == 0 && len(m.regexes) == 0 {
		return line
	}
	end := bytes.IndexByte(line[q:], ' ')
	if end < 0 {
		end = len(line)
	} else {
		end += q
	}
	masked := m.maskForm(line[q+1 : end])
	return append(append(append([]byte(nil), line[:q+1]...), masked...), line[end:]...)
}

func setContentLength(head []byte, n int64) []byte {
	var out []byte
	for len(head) > 0 {
		nl := bytes.Index(head, []byte("\r\n"))
		if nl < 0 {
			nl = len(head) - 2
		}
		line := head[:nl+2]
		head = head[nl+2:]
		if name, _, ok := bytes.Cut(line, []byte(":")); ok && strings.EqualFold(string(bytes.TrimSpace(name)), "content-length") {
			line = append(append(append([]byte(nil), name...), ": "...), strconv.FormatInt(n, 10)+"\r\n"...)
		}
		out = append(out, line...)
	}
	return out
}

// dechunk decodes a chunked body; ok is false when it is incomplete or
// malformed, and body is then what the chunks before the end hold (the
// part of a chunk the cap cut included). Trailers are dropped.
func dechunk(p []byte) (body, after []byte, ok bool) {
	for {
		nl := bytes.Index(p, []byte("\r\n"))
		if nl < 0 {
			return body, nil, false
		}
		sizeStr, _, _ := bytes.Cut(p[:nl], []byte(";"))
		size, err := strconv.ParseInt(strings.TrimSpace(string(sizeStr)), 16, 64)
		if err != nil || size < 0 {
			return body, nil, false
		}
		p = p[nl+2:]
		if size == 0 {
			end := bytes.Index(p, []byte("\r\n\r\n"))
			if bytes.HasPrefix(p, []byte("\r\n")) {
				return body, p[2:], true
			}
			if end < 0 {
				return body, nil, false
			}
			return body, p[end+4:], true
		}
		if int64(len(p)) < size+2 {
			return append(body, p[:min(int64(len(p)), size)]...), nil, false
		}
		body = append(body, p[:size]...)
		p = p[size+2:]
	}
}

func looksJSON(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && (b[0] == '{' || b[0] == '[')
}

func looksHTTP(b []byte) bool {
	sp := bytes.IndexByte(b, ' ')
	if sp <= 0 || sp > 10 {
		return false
	}
	for _, c := range b[:sp] {
		if !(c >= 'A' && c <= 'Z' || c == '/' || c == '.' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// maskForm masks fields of an a=b&c=d string: a field a rule names gets
// the replacement; any other value is URL-decoded for the regex rules (so
// that %2B49… is seen as +49…) and encoded again when they changed it.
// Everything else is kept byte for byte.
func (m *Masker) maskForm(b []byte) []byte {
	if len(m.forms) == 0 && len(m.regexes) == 0 {
		return b
	}
	var out []byte
	for i, part := range bytes.Split(b, []byte("&")) {
		if i > 0 {
			out = append(out, '&')
		}
		k, v, hasV := bytes.Cut(part, []byte("="))
		name, err := url.QueryUnescape(string(k))
		if repl, ok := m.forms[name]; ok && err == nil && hasV {
			out = append(append(append(out, k...), '='), url.QueryEscape(repl)...)
			continue
		}
		if hasV && len(m.regexes) > 0 {
			if dv, err := url.QueryUnescape(string(v)); err == nil {
				if mv := m.regex([]byte(dv)); string(mv) != dv {
					out = append(append(append(out, k...), '='), url.QueryEscape(string(mv))...)
					continue
				}
			}
		}
		out = append(out, part...)
	}
	return out
}

// maskJSON masks a JSON document by the path rules; parsed is false when b
// is not one whole document (cut by the cap, or followed by more).
func (m *Masker) maskJSON(b []byte) (out []byte, parsed bool) {
	if len(m.paths) == 0 {
		return b, true
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil || d.InputOffset() != int64(len(bytes.TrimRight(b, " \t\r\n"))) {
		return b, false
	}
	changed := false
	for _, r := range m.paths {
		var c bool
		v, c = applyPath(v, r.segs, r.repl)
		changed = changed || c
	}
	if !changed {
		return b, true
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return b, true
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), true
}

func applyPath(v any, segs []pathSeg, repl string) (any, bool) {
	if len(segs) == 0 {
		return repl, true
	}
	seg, rest := segs[0], segs[1:]
	changed := false
	set := func(child any) any {
		nv, c := applyPath(child, rest, repl)
		changed = changed || c
		return nv
	}
	switch seg.kind {
	case segKey:
		if o, ok := v.(map[string]any); ok {
			if child, ok := o[seg.name]; ok {
				o[seg.name] = set(child)
			}
		}
	case segAnyKey, segAnyIndex:
		switch o := v.(type) {
		case map[string]any:
			for k, child := range o {
				o[k] = set(child)
			}
		case []any:
			for i, child := range o {
				o[i] = set(child)
			}
		}
	case segIndex:
		if a, ok := v.([]any); ok && seg.index < len(a) {
			a[seg.index] = set(a[seg.index])
		}
	case segDescend:
		switch o := v.(type) {
		case map[string]any:
			for k, child := range o {
				if k == seg.name {
					o[k] = set(child)
					continue
				}
				nv, c := applyPath(child, segs, repl)
				o[k], changed = nv, changed || c
			}
		case []any:
			for i, child := range o {
				nv, c := applyPath(child, segs, repl)
				o[i], changed = nv, changed || c
			}
		}
	}
	return v, changed
}

// maskRESP applies the regex rules to every string of a RESP2/RESP3 stream
// and fixes bulk-string lengths; what does not parse (a payload cut by the
// cap) gets the regex rules as raw bytes.
func (m *Masker) maskRESP(p []byte) []byte {
	if len(m.regexes) == 0 {
		return p
	}
	var out []byte
	for len(p) > 0 {
		nl := bytes.Index(p, []byte("\r\n"))
		if nl < 1 {
			break
		}
		line := p[:nl]
		switch line[0] {
		case '$', '=', '!': // bulk string, verbatim string, bulk error
			n, err := strconv.Atoi(string(line[1:]))
			if err != nil {
				return append(out, m.regex(p)...)
			}
			if n < 0 { // null bulk string
				out = append(out, p[:nl+2]...)
				p = p[nl+2:]
				continue
			}
			if len(p) < nl+2+n+2 {
				return append(out, m.regex(p)...)
			}
			data := m.regex(p[nl+2 : nl+2+n])
			out = append(append(out, line[0]), strconv.Itoa(len(data))...)
			out = append(append(append(out, "\r\n"...), data...), "\r\n"...)
			p = p[nl+2+n+2:]
		case '+', '-':
			out = append(append(append(out, line[0]), m.regex(line[1:])...), "\r\n"...)
			p = p[nl+2:]
		default: // aggregates and numbers: copied, their elements follow
			out = append(out, p[:nl+2]...)
			p = p[nl+2:]
		}
	}
	if len(p) > 0 {
		out = append(out, m.regex(p)...)
	}
	return out
}

// maskMySQL applies the regex rules to the payload of every MySQL packet
// and fixes the packets' length headers.
func (m *Masker) maskMySQL(p []byte) []byte {
	if len(m.regexes) == 0 {
		return p
	}
	var out []byte
	for len(p) >= 4 {
		n := int(p[0]) | int(p[1])<<8 | int(p[2])<<16
		if len(p) < 4+n || n == 0xffffff {
			break
		}
		data := m.regex(p[4 : 4+n])
		if len(data) >= 0xffffff {
			data = p[4 : 4+n]
		}
		out = append(out, byte(len(data)), byte(len(data)>>8), byte(len(data)>>16), p[3])
		out = append(out, data...)
		p = p[4+n:]
	}
	if len(p) > 0 {
		out = append(out, m.regex(p)...)
	}
	return out
}

// maskJSONPrefix masks the values the path rules name in JSON that may be
// cut short (a body over the payload cap): it follows the document token
// by token, keeping every byte but the values it replaces, as far as the
// bytes go. A value cut by the end is replaced whole.
func (m *Masker) maskJSONPrefix(b []byte) []byte {
	if len(m.paths) == 0 {
		return b
	}
	type frame struct {
		obj     bool
		key     string
		idx     int
		wantKey bool
	}
	var stack []frame
	steps := func() []jsonStep {
		out := make([]jsonStep, len(stack))
		for i, f := range stack {
			out[i] = jsonStep{obj: f.obj, key: f.key, idx: f.idx}
		}
		return out
	}
	masked := func() (string, bool) {
		st := steps()
		for _, r := range m.paths {
			if matchPath(r.segs, st) {
				return r.repl, true
			}
		}
		return "", false
	}
	out := make([]byte, 0, len(b))
	replace := func(end int, repl string) int {
		q, _ := json.Marshal(repl)
		out = append(out, q...)
		return end
	}
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ':':
			out = append(out, c)
			i++
		case c == ',':
			if n := len(stack); n > 0 {
				if stack[n-1].obj {
					stack[n-1].wantKey = true
				} else {
					stack[n-1].idx++
				}
			}
			out = append(out, c)
			i++
		case c == '}' || c == ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			out = append(out, c)
			i++
		case c == '"' && len(stack) > 0 && stack[len(stack)-1].obj && stack[len(stack)-1].wantKey:
			end := jsonStringEnd(b, i)
			var key string
			if json.Unmarshal(b[i:end], &key) != nil {
				key = string(b[i+1 : end]) // cut: the key as far as it goes
			}
			stack[len(stack)-1].key, stack[len(stack)-1].wantKey = key, false
			out = append(out, b[i:end]...)
			i = end
		case c == '{' || c == '[':
			if repl, ok := masked(); ok {
				i = replace(jsonValueEnd(b, i), repl)
				continue
			}
			stack = append(stack, frame{obj: c == '{', wantKey: c == '{'})
			out = append(out, c)
			i++
		default: // a string, number, true, false or null
			end := jsonValueEnd(b, i)
			if end == i {
				end++ // a byte that is no JSON: kept, moved past
			}
			if repl, ok := masked(); ok {
				i = replace(end, repl)
				continue
			}
			out = append(out, b[i:end]...)
			i = end
		}
	}
	return out
}

// jsonStep is one step of the path to a value: a key of an object or an
// index of an array.
type jsonStep struct {
	obj bool
	key string
	idx int
}

// matchPath reports whether a path rule names the value at steps.
func matchPath(segs []pathSeg, steps []jsonStep) bool {
	if len(segs) == 0 {
		return len(steps) == 0
	}
	if len(steps) == 0 {
		return false
	}
	seg, st := segs[0], steps[0]
	switch seg.kind {
	case segKey:
		return st.obj && st.key == seg.name && matchPath(segs[1:], steps[1:])
	case segAnyKey, segAnyIndex:
		return matchPath(segs[1:], steps[1:])
	case segIndex:
		return !st.obj && st.idx == seg.index && matchPath(segs[1:], steps[1:])
	case segDescend:
		for k := range steps {
			if steps[k].obj && steps[k].key == seg.name && matchPath(segs[1:], steps[k+1:]) {
				return true
			}
		}
	}
	return false
}

// jsonStringEnd returns the index after the string starting at b[i] ('"'),
// or len(b) when it is cut.
func jsonStringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

// jsonValueEnd returns the index after the value starting at b[i], or
// len(b) when it is cut.
func jsonValueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return jsonStringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = jsonStringEnd(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	j := i
	for j < len(b) && !strings.ContainsRune(",}] \t\r\n", rune(b[j])) {
		j++
	}
	return j
}

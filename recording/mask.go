package recording

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/protocols"
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
// The rules reach each payload through its protocol's package
// (wire.Masker, found in wire/protocols by the recorded protocol name): it
// knows where the values are — HTTP header values, query and form fields
// and bodies (decoded from gzip, deflate or br; JSON whenever a body
// starts with { or [, whatever its Content-Type says); Redis arguments and
// reply strings; SQL literals, bound parameters and result rows of MySQL
// and PostgreSQL; HTTP/2 and gRPC header fields, bodies and protobuf
// string fields; the bytes of a raw protocol — and fixes every length
// that frames a changed value. The Masker is the rules (wire.MaskRules):
// JSON bodies that a rule changed are re-encoded compactly with keys in
// sorted order, bodies cut by the payload cap are masked in what is kept
// (JSON token by token), query strings and form values are URL-decoded
// before regex rules see them. What cannot be read is kept as it is and
// counted (Stats.MaskSkipped). docs/wire.md has the table.
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
	r := &maskRun{m: m}
	one := func(proto string, side wire.Side, p *[]byte) {
		out := r.mask(proto, side, *p)
		if !bytes.Equal(out, *p) {
			*p, changed = out, true
		}
	}
	one(s.Inbound.Proto, wire.Client, &s.Inbound.Request)
	one(s.Inbound.Proto, wire.Server, &s.Inbound.Response)
	for i := range s.Calls {
		call := &s.Calls[i]
		one(call.Proto, wire.Client, &call.Request)
		one(call.Proto, wire.Server, &call.Response)
		if m != nil && call.Decoded != "" { // made from the bytes before they were masked
			if d := r.Text([]byte(call.Decoded)); string(d) != call.Decoded {
				call.Decoded, changed = string(d), true
			}
		}
	}
	if rr := s.Random; m != nil && m.noCrypto && rr != nil && len(rr.Crypto) > 0 {
		masked := *rr
		masked.Crypto, masked.Masked = nil, true
		s.Random = &masked
		changed = true
	}
	return changed, r.skipped, r.why
}

// Mask returns p, a request (the bytes a client sent) of the protocol
// recorded as proto ("http", "redis", "mysql", "postgres", "http2",
// "grpc", anything else is raw bytes), masked, and whether it changed. p
// itself is never modified.
func (m *Masker) Mask(proto string, p []byte) ([]byte, bool) {
	return m.MaskSide(proto, wire.Client, p)
}

// MaskSide is Mask for bytes side sent: wire.Client for a request,
// wire.Server for its answer.
func (m *Masker) MaskSide(proto string, side wire.Side, p []byte) ([]byte, bool) {
	if m == nil || len(p) == 0 {
		return p, false
	}
	r := &maskRun{m: m}
	out := r.mask(proto, side, p)
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

// Skip counts a value kept as recorded (wire.MaskRules).
func (r *maskRun) Skip(why string) {
	r.skipped++
	if r.why == "" {
		r.why = why
	}
}

func (r *maskRun) mask(proto string, side wire.Side, p []byte) []byte {
	if r.m == nil || len(p) == 0 {
		return p
	}
	return protocols.All.MaskerFor(proto).Mask(side, p, r)
}

// The masking rules as the protocols' maskers apply them (wire.MaskRules).

func (r *maskRun) Header(name string) (string, bool) {
	repl, ok := r.m.headers[strings.ToLower(name)]
	return repl, ok
}

func (r *maskRun) Field(name string) (string, bool) {
	repl, ok := r.m.forms[name]
	return repl, ok
}

func (r *maskRun) Text(v []byte) []byte {
	out := v
	for _, rr := range r.m.regexes {
		out = rr.re.ReplaceAll(out, rr.repl)
	}
	if len(r.m.regexes) > 0 && bytes.Equal(out, v) {
		return v
	}
	return out
}

// JSON masks a JSON document by the path rules: the whole document when it
// is one, else (cut by the cap, or followed by more) token by token as
// far as the bytes go.
func (r *maskRun) JSON(doc []byte) []byte {
	out, parsed := r.m.maskJSON(doc)
	if !parsed {
		out = r.m.maskJSONPrefix(doc)
	}
	if bytes.Equal(out, doc) {
		return doc
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

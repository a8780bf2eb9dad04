// Masking: where the values of an HTTP/1.x message are (the query string,
// header values, bodies under their content coding, as JSON, form or
// text) for the masking rules a wire.MaskRules carries.

package http1

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"

	"github.com/andybalholm/brotli"
	"github.com/retrace-dev/retrace/wire"
)

// Mask masks one recorded HTTP/1.x payload (see MaskMessage).
func (protocol) Mask(_ wire.Side, msg []byte, rules wire.MaskRules) []byte {
	out := MaskMessage(msg, rules)
	if bytes.Equal(out, msg) {
		return msg
	}
	return out
}

// MaskMessage masks one HTTP/1.x message and, recursively, any message
// after it in the same payload (interim 1xx responses, pipelined
// requests): the query string's fields, the header values the rules name,
// the body (see MaskBody), then the rules' patterns over the head. When
// the body changes length Content-Length is fixed (shifted by the change,
// as the payload cap may have cut the body) and a chunked body becomes one
// chunk. A head cut by the payload cap is masked as far as it goes.
func MaskMessage(p []byte, r wire.MaskRules) []byte {
	end := bytes.Index(p, []byte("\r\n\r\n"))
	if end < 0 {
		return r.Text(maskHead(p, nil, r)) // a head cut by the payload cap
	}
	var h maskedHead
	head := maskHead(p[:end+2], &h, r) // keeps the last header's CRLF
	rest := p[end+4:]
	var body, after []byte
	chunked := false
	switch {
	case h.noBody:
		after = rest
	case h.chunked:
		var ok bool
		body, after, ok = dechunkCut(rest)
		if !ok { // cut by the cap (or malformed): mask what the chunks hold
			newBody := MaskBody(body, h.contentType, h.encoding, r)
			head = r.Text(head)
			if bytes.Equal(newBody, body) {
				return append(append(head, "\r\n"...), r.Text(rest)...)
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
	newBody := MaskBody(body, h.contentType, h.encoding, r)
	head = r.Text(head)
	if bytes.Equal(newBody, body) {
		// keep the body's framing as it was recorded
		out := append(append(head, "\r\n"...), rest[:len(rest)-len(after)]...)
		return appendAfter(out, after, r)
	}
	if chunked {
		var cb []byte
		if len(newBody) > 0 {
			cb = append(strconv.AppendInt(cb, int64(len(newBody)), 16), "\r\n"...)
			cb = append(append(cb, newBody...), "\r\n"...)
		}
		newBody = append(cb, "0\r\n\r\n"...)
	} else if len(newBody) != len(body) && h.contentLength >= 0 {
		head = setContentLength(head, h.contentLength+int64(len(newBody)-len(body)))
	}
	return appendAfter(append(append(head, "\r\n"...), newBody...), after, r)
}

func appendAfter(out, after []byte, r wire.MaskRules) []byte {
	switch {
	case len(after) == 0:
		return out
	case startsMessage(after):
		return append(out, MaskMessage(after, r)...)
	default:
		return append(out, r.Text(after)...)
	}
}

// startsMessage: after starts like a request or status line (a word of
// upper-case letters, digits, '/' and '.' and a space).
func startsMessage(b []byte) bool {
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

// MaxMaskDecoded bounds a body decoded for masking: a compression bomb is
// not unpacked beyond it, and such a body is kept as recorded (reported
// with MaskRules.Skip).
const MaxMaskDecoded = 64 << 20

// MaskBody masks an HTTP body (of HTTP/1 or HTTP/2) with its Content-Type
// and Content-Encoding: decoded first when it has a content coding (gzip,
// deflate, br, or several), as JSON whenever it starts like JSON (whatever
// the Content-Type says), field by field when it is a form, then by the
// rules' patterns; encoded again when it changed. A body it cannot decode
// is reported with Skip and kept as it is. A stream cut by the payload cap
// is masked in what it holds.
func MaskBody(body []byte, contentType, encoding string, r wire.MaskRules) []byte {
	if len(body) == 0 {
		return body
	}
	contentType, encoding = strings.ToLower(contentType), strings.ToLower(encoding)
	encs := contentCodings(encoding)
	plain := body
	for i := len(encs) - 1; i >= 0; i-- {
		dec, err := decodeContentCoding(encs[i], plain)
		if dec == nil {
			r.Skip(fmt.Sprintf("an HTTP body with Content-Encoding %q: %v", encoding, err))
			return body
		}
		if len(dec) > MaxMaskDecoded {
			r.Skip(fmt.Sprintf("an HTTP body with Content-Encoding %q decodes to more than %d bytes", encoding, MaxMaskDecoded))
			return body
		}
		plain = dec // a stream the cap cut decodes to what it holds
	}
	masked := maskPlainBody(plain, contentType, r)
	if len(encs) == 0 {
		return masked
	}
	if bytes.Equal(masked, plain) {
		return body
	}
	for _, e := range encs {
		masked = encodeContentCoding(e, masked)
	}
	return masked
}

// maskPlainBody masks a body that is not (or no longer) encoded.
func maskPlainBody(b []byte, contentType string, r wire.MaskRules) []byte {
	if looksJSON(b) {
		return r.Text(r.JSON(b))
	}
	if strings.Contains(contentType, "application/x-www-form-urlencoded") {
		return r.Text(MaskForm(b, r))
	}
	return r.Text(b)
}

func looksJSON(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && (b[0] == '{' || b[0] == '[')
}

// contentCodings returns the codings of a Content-Encoding value, in the
// order they were applied, without "identity".
func contentCodings(v string) []string {
	var out []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" && e != "identity" {
			out = append(out, e)
		}
	}
	return out
}

// decodeContentCoding decodes b of the content coding enc. A stream cut
// short decodes to what it holds (with the error); nil is a body it
// cannot read.
func decodeContentCoding(enc string, b []byte) ([]byte, error) {
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
	out, err := io.ReadAll(io.LimitReader(rd, MaxMaskDecoded+1))
	if err != nil && len(out) == 0 {
		return nil, err
	}
	if out == nil {
		out = []byte{}
	}
	return out, err
}

// encodeContentCoding encodes b in the content coding enc (one that
// decodeContentCoding reads).
func encodeContentCoding(enc string, b []byte) []byte {
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

// maskedHead is what masking reads of a message head.
type maskedHead struct {
	contentLength int64 // -1 when absent
	chunked       bool
	noBody        bool // 1xx, 204 and 304 responses
	contentType   string
	encoding      string
}

// maskHead masks the start line's query string and the header values of a
// message head (lines ending in CRLF) and fills h.
func maskHead(head []byte, h *maskedHead, r wire.MaskRules) []byte {
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
			line = maskStartLine(line, h, r)
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
			if repl, ok := r.Header(lname); ok {
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

func maskStartLine(line []byte, h *maskedHead, r wire.MaskRules) []byte {
	if bytes.HasPrefix(line, []byte("HTTP/")) {
		if h != nil {
			if f := bytes.Fields(line); len(f) >= 2 {
				code := string(f[1])
				h.noBody = strings.HasPrefix(code, "1") || code == "204" || code == "304"
			}
		}
		return line
	}
	// METHOD TARGET VERSION
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 < 0 {
		return line
	}
	end := bytes.IndexByte(line[sp1+1:], ' ')
	if end < 0 {
		end = len(line)
	} else {
		end += sp1 + 1
	}
	target := MaskTarget(line[sp1+1:end], r)
	if bytes.Equal(target, line[sp1+1:end]) {
		return line
	}
	return append(append(append([]byte(nil), line[:sp1+1]...), target...), line[end:]...)
}

// MaskTarget masks the fields of a request target's query string (see
// MaskForm); the path is kept (the rules' patterns reach it with the rest
// of the head).
func MaskTarget(target []byte, r wire.MaskRules) []byte {
	q := bytes.IndexByte(target, '?')
	if q < 0 {
		return target
	}
	masked := MaskForm(target[q+1:], r)
	if bytes.Equal(masked, target[q+1:]) {
		return target
	}
	return append(append([]byte(nil), target[:q+1]...), masked...)
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

// dechunkCut decodes a chunked body; ok is false when it is incomplete or
// malformed, and body is then what the chunks before the end hold (the
// part of a chunk the cap cut included). Trailers are dropped.
func dechunkCut(p []byte) (body, after []byte, ok bool) {
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

// MaskForm masks the fields of an a=b&c=d string: a field the rules name
// (MaskRules.Field) gets the replacement; any other value is URL-decoded
// for the rules' patterns (so that %2B49… is seen as +49…) and encoded
// again when they changed it. Everything else is kept byte for byte.
func MaskForm(b []byte, r wire.MaskRules) []byte {
	var out []byte
	changed := false
	for i, part := range bytes.Split(b, []byte("&")) {
		if i > 0 {
			out = append(out, '&')
		}
		k, v, hasV := bytes.Cut(part, []byte("="))
		name, err := url.QueryUnescape(string(k))
		if repl, ok := r.Field(name); ok && err == nil && hasV {
			out = append(append(append(out, k...), '='), url.QueryEscape(repl)...)
			changed = true
			continue
		}
		if hasV {
			if dv, err := url.QueryUnescape(string(v)); err == nil {
				if mv := r.Text([]byte(dv)); string(mv) != dv {
					out = append(append(append(out, k...), '='), url.QueryEscape(string(mv))...)
					changed = true
					continue
				}
			}
		}
		out = append(out, part...)
	}
	if !changed {
		return b
	}
	return out
}

// Message boundaries of requests and responses (Content-Length, chunked
// transfer coding, bodiless responses), `Expect: 100-continue`, decoding of
// chunked and gzip bodies for comparison, and the error response of a
// missing mock.

package http1

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrSyntax reports bytes that are not an HTTP/1.x message.
var ErrSyntax = errors.New("http1: malformed message")

// Continue is the interim response that tells a client waiting on
// `Expect: 100-continue` to send its body.
const Continue = "HTTP/1.1 100 Continue\r\n\r\n"

// MaxHeader bounds the size of a message head.
const MaxHeader = 1 << 20

// Head is the parsed start line and framing headers of a message.
type Head struct {
	Method, Target string // requests
	Status         int    // responses
	HeadLen        int    // bytes of start line and headers, final CRLF included
	ContentLength  int64  // -1 when absent
	Chunked        bool
	Expect100      bool
	Close          bool
	Gzip           bool // Content-Encoding: gzip
}

// ParseHead parses the head of a request (request=true) or response at the
// start of b. HeadLen is 0 when the head is not complete.
func ParseHead(b []byte, request bool) (Head, error) {
	h := Head{ContentLength: -1}
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		if len(b) > MaxHeader {
			return h, fmt.Errorf("%w: head longer than %d bytes", ErrSyntax, MaxHeader)
		}
		return h, nil
	}
	if end+4 > MaxHeader {
		return h, fmt.Errorf("%w: head longer than %d bytes", ErrSyntax, MaxHeader)
	}
	lines := bytes.Split(b[:end], []byte("\r\n"))
	start := string(lines[0])
	if request {
		parts := strings.SplitN(start, " ", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "HTTP/1.") || parts[0] == "" || !isToken(parts[0]) {
			return h, fmt.Errorf("%w: bad request line %q", ErrSyntax, clip(start))
		}
		h.Method, h.Target = parts[0], parts[1]
		h.Close = parts[2] == "HTTP/1.0"
	} else {
		if !strings.HasPrefix(start, "HTTP/1.") || len(start) < 12 {
			return h, fmt.Errorf("%w: bad status line %q", ErrSyntax, clip(start))
		}
		code, err := strconv.Atoi(start[9:12])
		if err != nil || code < 100 {
			return h, fmt.Errorf("%w: bad status line %q", ErrSyntax, clip(start))
		}
		h.Status = code
	}
	for _, ln := range lines[1:] {
		i := bytes.IndexByte(ln, ':')
		if i <= 0 {
			return h, fmt.Errorf("%w: bad header line %q", ErrSyntax, clip(string(ln)))
		}
		name := string(bytes.TrimSpace(ln[:i]))
		val := string(bytes.TrimSpace(ln[i+1:]))
		switch {
		case strings.EqualFold(name, "Content-Length"):
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil || n < 0 {
				return h, fmt.Errorf("%w: bad Content-Length %q", ErrSyntax, clip(val))
			}
			h.ContentLength = n
		case strings.EqualFold(name, "Transfer-Encoding"):
			h.Chunked = strings.Contains(strings.ToLower(val), "chunked")
		case strings.EqualFold(name, "Expect"):
			h.Expect100 = strings.EqualFold(val, "100-continue")
		case strings.EqualFold(name, "Connection"):
			h.Close = strings.EqualFold(val, "close")
		case strings.EqualFold(name, "Content-Encoding"):
			h.Gzip = strings.EqualFold(val, "gzip")
		}
	}
	h.HeadLen = end + 4
	return h, nil
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("()<>@,;:\\\"/[]?={}", c) >= 0 {
			return false
		}
	}
	return true
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// chunkedLen returns the length of a complete chunked body (trailers
// included) at the start of b, or 0 when it is not complete.
func chunkedLen(b []byte) (int, error) {
	p := 0
	for {
		i := bytes.Index(b[p:], []byte("\r\n"))
		if i < 0 {
			if len(b)-p > 1024 {
				return 0, fmt.Errorf("%w: chunk size line too long", ErrSyntax)
			}
			return 0, nil
		}
		sz := string(b[p : p+i])
		if j := strings.IndexByte(sz, ';'); j >= 0 {
			sz = sz[:j]
		}
		n, err := strconv.ParseInt(strings.TrimSpace(sz), 16, 64)
		if err != nil || n < 0 || n > 1<<40 {
			return 0, fmt.Errorf("%w: bad chunk size %q", ErrSyntax, clip(sz))
		}
		p += i + 2
		if n == 0 {
			// trailers, then an empty line
			for {
				j := bytes.Index(b[p:], []byte("\r\n"))
				if j < 0 {
					return 0, nil
				}
				p += j + 2
				if j == 0 {
					return p, nil
				}
			}
		}
		if int64(len(b)-p) < n+2 {
			return 0, nil
		}
		p += int(n)
		if b[p] != '\r' || b[p+1] != '\n' {
			return 0, fmt.Errorf("%w: chunk not followed by CRLF", ErrSyntax)
		}
		p += 2
	}
}

// RequestLen returns the head of the request at the start of b and the
// length of the whole request; n is 0 when the request is not complete
// (h.HeadLen tells whether at least its head is).
func RequestLen(b []byte) (h Head, n int, err error) {
	h, err = ParseHead(b, true)
	if err != nil || h.HeadLen == 0 {
		return h, 0, err
	}
	n, err = bodyEnd(b, h)
	return h, n, err
}

// ResponseLen returns the length of the response at the start of b to a
// request with method method, or 0 when it is not complete. A response
// without Content-Length or chunked coding runs to the end of the
// connection: its length is reported as -1.
func ResponseLen(b []byte, method string) (h Head, n int, err error) {
	h, err = ParseHead(b, false)
	if err != nil || h.HeadLen == 0 {
		return h, 0, err
	}
	bodiless := method == "HEAD" || h.Status < 200 || h.Status == 204 || h.Status == 304
	if bodiless {
		return h, h.HeadLen, nil
	}
	if !h.Chunked && h.ContentLength < 0 {
		return h, -1, nil
	}
	n, err = bodyEnd(b, h)
	return h, n, err
}

func bodyEnd(b []byte, h Head) (int, error) {
	switch {
	case h.Chunked:
		n, err := chunkedLen(b[h.HeadLen:])
		if err != nil || n == 0 {
			return 0, err
		}
		return h.HeadLen + n, nil
	case h.ContentLength > 0:
		if int64(len(b)-h.HeadLen) < h.ContentLength {
			return 0, nil
		}
		return h.HeadLen + int(h.ContentLength), nil
	}
	return h.HeadLen, nil
}

// Body returns the body of the complete message msg with head h, with the
// chunked coding removed and, when gzip-encoded, decompressed (at most limit
// bytes). It returns the raw body when decoding fails.
func Body(msg []byte, h Head, limit int) []byte {
	if h.HeadLen > len(msg) {
		return nil
	}
	body := msg[h.HeadLen:]
	if h.Chunked {
		body = dechunk(body)
	}
	if h.Gzip {
		body, _ = uncompress("gzip", body, false, limit)
	}
	return body
}

func dechunk(b []byte) []byte {
	var out []byte
	for {
		i := bytes.Index(b, []byte("\r\n"))
		if i < 0 {
			return out
		}
		sz := string(b[:i])
		if j := strings.IndexByte(sz, ';'); j >= 0 {
			sz = sz[:j]
		}
		n, err := strconv.ParseInt(strings.TrimSpace(sz), 16, 64)
		if err != nil || n <= 0 || int64(len(b)-i-2) < n {
			return out
		}
		out = append(out, b[i+2:i+2+int(n)]...)
		b = b[i+2+int(n):]
		if len(b) >= 2 {
			b = b[2:]
		}
	}
}

// StripContinue removes interim 1xx responses from the start of a recorded
// response, for a client that already got its 100 Continue from the mock.
func StripContinue(resp []byte) []byte {
	for bytes.HasPrefix(resp, []byte("HTTP/1.")) && len(resp) > 12 && resp[9] == '1' {
		i := bytes.Index(resp, []byte("\r\n\r\n"))
		if i < 0 {
			return resp
		}
		resp = resp[i+4:]
	}
	return resp
}

// ErrorResponse returns a complete response with the given status whose
// X-Retrace-Missing header and text body carry reason.
func ErrorResponse(status int, reason string) []byte {
	reason = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, reason)
	body := reason + "\n"
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nX-Retrace-Missing: %s\r\nContent-Length: %d\r\n\r\n%s",
		status, statusText(status), reason, len(body), body)
}

func statusText(code int) string {
	switch code {
	case 502:
		return "Bad Gateway"
	case 503:
		return "Service Unavailable"
	case 504:
		return "Gateway Timeout"
	}
	return "Internal Server Error"
}

// NormalizePath returns the path of target without its query, with every
// segment made only of digits (or a UUID or long hex string) replaced by
// '*', so /users/17 and /users/42 are the same operation.
func NormalizePath(target string) string {
	if i := strings.IndexByte(target, '?'); i >= 0 {
		target = target[:i]
	}
	if !strings.ContainsAny(target, "0123456789") {
		return target
	}
	segs := strings.Split(target, "/")
	for i, s := range segs {
		if isID(s) {
			segs[i] = "*"
		}
	}
	return strings.Join(segs, "/")
}

func isID(s string) bool {
	if s == "" {
		return false
	}
	digits, hex := true, len(s) >= 16
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			digits = false
			if !(c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == '-') {
				hex = false
			}
		}
	}
	return digits || hex
}

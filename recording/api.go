package recording

import "strings"

// APIName names the API an HTTP request belongs to, for grouping results
// of regression and load replays the same way: "METHOD /path", without the
// query, with every path segment that looks like an identifier replaced by
// "{id}" (see IDSegment), so /orders/17 and /orders/18 are one API.
func APIName(method, path string) string {
	if method == "" {
		method = "GET"
	}
	return method + " " + NormalizePath(path)
}

// NormalizePath returns path without query or fragment, with identifier-like
// segments replaced by "{id}". It allocates only when it changes something.
func NormalizePath(path string) string {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	if path == "" {
		return "/"
	}
	var b []byte
	start := 0
	for i := 0; i <= len(path); i++ {
		if i < len(path) && path[i] != '/' {
			continue
		}
		if seg := path[start:i]; IDSegment(seg) {
			if b == nil {
				b = append(make([]byte, 0, len(path)+4), path[:start]...)
			}
			b = append(b, "{id}"...)
		} else if b != nil {
			b = append(b, seg...)
		}
		if i < len(path) && b != nil {
			b = append(b, '/')
		}
		start = i + 1
	}
	if b == nil {
		return path
	}
	return string(b)
}

// IDSegment reports whether a path segment looks like an identifier rather
// than a name: all digits ("17"), a UUID or long hex string with a digit,
// or any word with three or more digits ("ord-12345", "MN-270").
func IDSegment(s string) bool {
	if s == "" {
		return false
	}
	digits, hex, dashes := 0, 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F':
			hex++
		case c == '-':
			dashes++
		}
	}
	switch {
	case digits == len(s):
		return true
	case digits >= 3:
		return true
	default:
		return len(s) >= 16 && digits > 0 && digits+hex+dashes == len(s)
	}
}

// API is the name of the API the session's inbound request belongs to
// (APIName of its request line), or "" when the request line is unreadable.
func (s *Session) API() string {
	line := s.Inbound.Request
	if i := strings.IndexByte(string(line[:min(len(line), 8192)]), '\n'); i >= 0 {
		line = line[:i]
	}
	method, rest, ok := strings.Cut(strings.TrimSpace(string(line)), " ")
	if !ok {
		return ""
	}
	target, _, _ := strings.Cut(rest, " ")
	if i := strings.Index(target, "://"); i >= 0 { // absolute form
		if j := strings.IndexByte(target[i+3:], '/'); j >= 0 {
			target = target[i+3+j:]
		} else {
			target = "/"
		}
	}
	return APIName(method, target)
}

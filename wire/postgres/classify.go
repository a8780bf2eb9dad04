package postgres

import (
	"bytes"
	"strings"
)

// SetupWrite reports whether a client's write is connection set-up, which
// belongs to the connection rather than to a request: start-up packets
// (StartupMessage, SSLRequest, GSSENCRequest, CancelRequest), the
// authentication exchange (password, SASL and GSS messages), Terminate,
// a ping (a simple query of nothing but comments and semicolons, as pgx
// and database/sql send to check a pooled connection), and statements
// prepared or closed (Parse, Describe of a statement, Close, Sync, Flush
// and nothing else: whether a request prepares depends on what its
// connection prepared before, as a statement cache decides). A write of
// bytes that are not whole messages is not set-up.
func SetupWrite(p []byte) bool {
	untyped := len(p) > 0 && p[0] == 0
	seen, setup := false, true
	n, err := Messages(p, true, untyped, func(m Message) bool {
		seen = true
		switch m.Type {
		case 0, Password, Terminate, Parse, Close, Sync, Flush:
		case Describe:
			setup = len(m.Body) > 0 && m.Body[0] == 'S'
		case Query:
			setup = IsPing(CString(m.Body))
		default:
			setup = false
		}
		return setup
	})
	return err == nil && seen && setup && n == len(p)
}

// IsPing reports whether a query text holds no statement: only white
// space, comments and semicolons.
func IsPing(q string) bool {
	for q != "" {
		switch {
		case q[0] == ' ' || q[0] == '\t' || q[0] == '\n' || q[0] == '\r' || q[0] == ';':
			q = q[1:]
		case strings.HasPrefix(q, "--"):
			i := strings.IndexByte(q, '\n')
			if i < 0 {
				return true
			}
			q = q[i+1:]
		case strings.HasPrefix(q, "/*"):
			i := strings.Index(q[2:], "*/")
			if i < 0 {
				return false
			}
			q = q[2+i+2:]
		default:
			return false
		}
	}
	return true
}

// CString returns the NUL-terminated string at the start of b (all of b
// when it has no NUL).
func CString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// Insignificant reports whether a client request carries nothing a
// downstream diff compares: only Close, Sync, Flush and Terminate
// messages (when a driver closes statements and connections depends on
// its pool, not on the request).
func Insignificant(p []byte) bool {
	seen, only := false, true
	n, err := Messages(p, true, false, func(m Message) bool {
		seen = true
		only = m.Type == Close || m.Type == Sync || m.Type == Flush || m.Type == Terminate
		return only
	})
	return err == nil && seen && only && n == len(p)
}

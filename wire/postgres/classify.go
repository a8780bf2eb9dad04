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
// and database/sql send to check a pooled connection), session settings
// (a simple query of nothing but SET and RESET statements, as a pool's
// AfterConnect sends on each connection it opens: see IsSessionSet), and statements
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
			q := CString(m.Body)
			setup = IsPing(q) || IsSessionSet(q)
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

// IsSessionSet reports whether a query text holds nothing but statements
// that set the session's parameters: SET (not SET LOCAL, SET TRANSACTION
// or SET CONSTRAINTS, which belong to a transaction) and RESET, separated
// by semicolons. Such a query configures the connection, whichever
// request's goroutine opened it (pgx's AfterConnect runs on the
// goroutine of the request that made the pool grow), so it is set-up:
// answered in replay from any recording of the destination that sent the
// same text.
func IsSessionSet(q string) bool {
	seen := false
	for _, st := range strings.Split(q, ";") {
		st = strings.TrimSpace(st)
		if st == "" {
			continue
		}
		w := strings.Fields(strings.ToUpper(st[:min(len(st), 40)]))
		switch {
		case len(w) >= 1 && w[0] == "RESET":
		case len(w) >= 2 && w[0] == "SET" && w[1] != "LOCAL" && w[1] != "TRANSACTION" && w[1] != "CONSTRAINTS" &&
			w[1] != "SESSION" || len(w) >= 3 && w[0] == "SET" && w[1] == "SESSION" && w[2] != "CHARACTERISTICS":
		default:
			return false
		}
		seen = true
	}
	return seen
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

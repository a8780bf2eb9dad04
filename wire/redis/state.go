// Per-connection state: the database a connection selected and the RESP
// version it negotiated, on the recorded side (Session, from the set-up
// calls of the connection, learnt by the Book from every recording) and on
// the live side (the Answerer).

package redis

import (
	"bytes"
	"strconv"

	"github.com/retrace-dev/retrace/wire"
)

// State is what a connection said that changes what its later commands
// mean. The zero value is a fresh connection: database 0, RESP2.
type State struct {
	DB    int  // the database SELECT chose
	RESP3 bool // HELLO 3 was answered
}

// Apply follows one command and the reply it got: SELECT n answered OK
// selects database n, HELLO answered with its map (RESP3) or array sets
// the version it asked for, RESET returns to a fresh connection.
func (s *State) Apply(args [][]byte, reply []byte) {
	if len(args) == 0 || len(reply) == 0 || reply[0] == '-' || reply[0] == '!' {
		return // an error changes nothing
	}
	switch Op(args) {
	case "SELECT":
		if len(args) == 2 {
			if n, err := strconv.Atoi(string(args[1])); err == nil && n >= 0 {
				s.DB = n
			}
		}
	case "HELLO":
		if len(args) > 1 {
			switch string(args[1]) {
			case "3":
				s.RESP3 = true
			case "2":
				s.RESP3 = false
			}
		}
	case "RESET":
		*s = State{}
	}
}

// FeaturesIn computes what matching knows of one command sent on a
// connection in state st: a command of database n ≠ 0 has the Op
// "CMD db=n", so that a GET k in database 1 never matches the GET k of
// database 0; HELLO 3 has the Op "HELLO 3", so that a connection that asks
// for RESP3 is never answered the RESP2 hello of another.
func FeaturesIn(msg []byte, args [][]byte, st State) wire.Request {
	r := Features(msg, args)
	switch {
	case r.Op == "HELLO" && len(args) > 1 && string(args[1]) == "3":
		r.Op = "HELLO 3"
	case st.DB != 0 && !r.Setup && r.Op != "":
		r.Op += " db=" + strconv.Itoa(st.DB)
	}
	return r
}

// book learns, from the set-up calls of every recording of a destination,
// the state each recorded connection was left in: a connection set up in
// one session (or in the background) serves the requests of others.
type book struct {
	wire.NoBook
	conns map[int64]State
}

func newBook() *book { return &book{conns: map[int64]State{}} }

func (b *book) Learn(c wire.Call) {
	if !c.Setup || c.Conn == 0 {
		return
	}
	st := b.conns[c.Conn]
	follow(&st, c.Request, c.Response)
	b.conns[c.Conn] = st
}

// state returns what the book learnt of a recorded connection.
func (b *book) state(conn int64) (State, bool) {
	st, ok := b.conns[conn]
	return st, ok
}

// follow applies every command of a recorded burst with its reply.
func follow(st *State, req, resp []byte) {
	for len(req) > 0 {
		args, n, err := ParseCommand(req, len(req))
		if err != nil || n == 0 {
			return
		}
		m, err := ReplyLen(resp)
		if err != nil || m == 0 {
			return
		}
		st.Apply(args, resp[:m])
		req, resp = req[n:], resp[m:]
	}
}

// ToRESP2 returns a reply as a RESP2 connection expects it: maps, sets and
// pushes become arrays, null becomes the null bulk string, booleans
// integers, doubles, big numbers and verbatim strings bulk strings (the
// text without its format), bulk errors simple errors, attributes are
// dropped. A reply with nothing of RESP3 is returned as it is, as are
// bytes that are not whole replies.
func ToRESP2(reply []byte) []byte {
	if !hasRESP3(reply) {
		return reply
	}
	var out []byte
	for b := reply; len(b) > 0; {
		n, err := ReplyLen(b)
		if err != nil || n == 0 {
			return reply
		}
		out = appendRESP2(out, b[:n], 0)
		b = b[n:]
	}
	return out
}

// hasRESP3 reports whether reply may hold a RESP3 type: any line starting
// with one of their type bytes (a cheap over-estimate).
func hasRESP3(reply []byte) bool {
	for i := 0; i < len(reply); {
		switch reply[i] {
		case '%', '~', '>', '|', '_', '#', ',', '(', '=', '!':
			return true
		}
		j := bytes.Index(reply[i:], []byte("\r\n"))
		if j < 0 {
			return false
		}
		i += j + 2
	}
	return false
}

// appendRESP2 appends one whole reply (checked by ReplyLen) in RESP2.
func appendRESP2(out, b []byte, depth int) []byte {
	l := line(b)
	head := b[1:l]
	switch b[0] {
	case '_':
		return append(out, "$-1\r\n"...)
	case '#':
		if string(head) == "t" {
			return append(out, ":1\r\n"...)
		}
		return append(out, ":0\r\n"...)
	case ',', '(':
		return Bulk(out, head)
	case '=', '!':
		n, _ := strconv.Atoi(string(head))
		v := b[l+2 : l+2+n]
		if b[0] == '!' {
			return append(append(append(out, '-'), bytes.ReplaceAll(bytes.ReplaceAll(v, []byte("\r"), []byte(" ")), []byte("\n"), []byte(" "))...), "\r\n"...)
		}
		if len(v) >= 4 && v[3] == ':' {
			v = v[4:] // the format, "txt:"
		}
		return Bulk(out, v)
	case '%', '~', '>', '|', '*':
		count, _ := strconv.Atoi(string(head))
		if count < 0 {
			return append(out, b...)
		}
		if b[0] == '%' || b[0] == '|' {
			count *= 2
		}
		p := l + 2
		if b[0] != '|' {
			out = append(strconv.AppendInt(append(out, '*'), int64(count), 10), "\r\n"...)
		}
		for range count {
			n, _ := valueLen(b[p:], depth+1)
			if b[0] != '|' {
				out = appendRESP2(out, b[p:p+n], depth+1)
			}
			p += n
		}
		if b[0] == '|' { // the attribute is dropped, the value it describes kept
			n, _ := valueLen(b[p:], depth+1)
			out = appendRESP2(out, b[p:p+n], depth+1)
		}
		return out
	}
	return append(out, b...)
}

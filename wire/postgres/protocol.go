package postgres

import (
	"encoding/binary"

	"github.com/retrace-dev/retrace/wire"
)

// Protocol is PostgreSQL as a wire.Protocol.
var Protocol wire.Protocol = protocol{}

type protocol struct{}

func (protocol) Name() string { return Proto }

// Detect: the client speaks first, with a start-up packet.
func (protocol) Detect(client, server []byte) wire.Verdict {
	if len(client) == 0 {
		if len(server) > 0 {
			return wire.No
		}
		return wire.NotYet
	}
	return Detect(client)
}

func (protocol) NewFramer(side wire.Side, limit int) wire.Framer {
	if side == wire.Client {
		return NewFrontendFramer(limit)
	}
	return NewBackendFramer(limit)
}

func (protocol) NewTap() wire.Tap { return &tap{} }

func (protocol) NewBook() wire.Book { return newBook() }

func (protocol) NewSession(b wire.Book) wire.Session {
	pb, _ := b.(*book)
	if pb == nil {
		pb = newBook()
	}
	return newSession(pb)
}

func (protocol) NewAnswerer(env wire.Env) wire.Answerer { return newAnswerer(env) }

// tap is capture's view of a PostgreSQL connection: a call is a write
// and its answer; start-up, authentication, pings, prepares and
// Terminate are set-up. Answers are attributed by the protocol, not by
// the goroutine that reads them: pgx reads from a background goroutine
// when a write is slow (started by a timer, it has no trace), and the
// answers of a connection come in the order of its requests. The tap
// counts the ReadyForQuery messages (or CopyInResponse, CopyBothResponse)
// the requests written so far are owed, reading only message headers:
// bytes read once nothing is owed answer a request not reported yet, or
// are a notification between requests; capture gives them to the next
// call.
type tap struct {
	owed    int // answers owed to the requests written; -1: unknown (start-up)
	hdr     [5]byte
	hdrN    int // bytes of the current message's header read so far
	skip    int // bytes of the current message's body still to come
	msgType byte
	encAns  bool // the next byte answers an SSLRequest or GSSENCRequest
}

func (t *tap) Write(p []byte, tid string, _ bool) wire.Filing {
	setup := SetupWrite(p)
	if len(p) > 0 && (p[0] == 0 || p[0] == Password) {
		t.owed = -1 // the server's answers to a start-up are its own business
		if m, n, err := Next(p, true, true, 0); err == nil && n > 0 && (m.Code == SSLRequestCode || m.Code == GSSENCRequestCode) {
			t.encAns = true
		}
	} else if t.owed >= 0 {
		Messages(p, true, false, func(m Message) bool {
			switch m.Type {
			case Sync, Query, CopyDone, CopyFail, FunctionCall:
				t.owed++
			}
			return true
		})
	}
	return wire.Filing{Trace: tid, Setup: setup}
}

// Read follows the server's message headers; it reports false when the
// requests written so far have had every answer they are owed.
func (t *tap) Read(p []byte) bool {
	if t.owed < 0 {
		// start-up: owed is known again from the first ReadyForQuery on
		t.scan(p, true)
		return true
	}
	if t.owed == 0 && t.hdrN == 0 && t.skip == 0 {
		return false
	}
	t.scan(p, false)
	return true
}

// scan advances over p's message headers and bodies.
func (t *tap) scan(p []byte, startup bool) {
	if t.encAns && len(p) > 0 {
		t.encAns, p = false, p[1:]
	}
	for len(p) > 0 {
		if t.skip > 0 {
			n := min(t.skip, len(p))
			t.skip -= n
			p = p[n:]
			if t.skip == 0 {
				t.done(startup)
			}
			continue
		}
		n := copy(t.hdr[t.hdrN:], p)
		t.hdrN += n
		p = p[n:]
		if t.hdrN < 5 {
			return
		}
		t.hdrN = 0
		t.msgType = t.hdr[0]
		l := int(binary.BigEndian.Uint32(t.hdr[1:]))
		if l < 4 {
			t.owed = -1 // not PostgreSQL framing any more: attribute everything
			return
		}
		if t.skip = l - 4; t.skip == 0 {
			t.done(startup)
		}
	}
}

// done notes a whole message of type t.msgType.
func (t *tap) done(startup bool) {
	switch t.msgType {
	case ReadyForQuery:
		if startup {
			t.owed = 0
		} else if t.owed > 0 {
			t.owed--
		}
	case CopyInResponse, CopyBothResponse:
		if !startup && t.owed > 0 {
			t.owed--
		}
	}
}

func (*tap) ReadsOnWriter() bool { return false }

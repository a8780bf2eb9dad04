package postgres

import "github.com/retrace-dev/retrace/wire"

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

func (protocol) NewTap() wire.Tap { return tap{} }

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
// and its answer; start-up, authentication, pings and Terminate are
// set-up. Drivers read answers on the goroutine that wrote (pgx also
// from a background reader it starts from there, which inherits the
// trace).
type tap struct{}

func (tap) Write(p []byte, tid string, _ bool) wire.Filing {
	return wire.Filing{Trace: tid, Setup: SetupWrite(p)}
}

func (tap) Read([]byte) bool    { return true }
func (tap) ReadsOnWriter() bool { return true }

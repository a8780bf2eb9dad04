package postgres

import (
	"fmt"

	"github.com/retrace-dev/retrace/wire"
)

// framer cuts one direction of a connection into whole messages
// (wire.Framer): the caller keeps the bytes and asks about their start.
type framer struct {
	frontend bool
	limit    int
	typed    bool // frontend: the StartupMessage has been framed
	// backend: one-byte answers owed to encryption requests the client
	// made (SSLRequest, GSSENCRequest), told through Request
	encAnswers int
	off        int64 // stream offset of the next message, for errors
}

var _ wire.Framer = (*framer)(nil)

// NewFrontendFramer returns a framer of what a client sends: untyped
// start-up packets up to the StartupMessage, typed messages after it.
func NewFrontendFramer(limit int) wire.Framer { return &framer{frontend: true, limit: limit} }

// NewBackendFramer returns a framer of what a server sends; tell it of
// the client's requests (Request) so it knows that an encryption request
// is answered by a single byte.
func NewBackendFramer(limit int) wire.Framer { return &framer{limit: limit} }

func (f *framer) Next(buf []byte) (int, error) {
	if !f.frontend && f.encAnswers > 0 {
		if len(buf) == 0 {
			return 0, nil
		}
		f.encAnswers--
		f.off++
		return 1, nil
	}
	m, n, err := Next(buf, f.frontend, f.frontend && !f.typed, f.limit)
	if err != nil {
		side := "server"
		if f.frontend {
			side = "client"
		}
		return 0, fmt.Errorf("%s message at stream byte %d: %w", side, f.off, err)
	}
	if n > 0 {
		f.off += int64(n)
		if f.frontend && m.IsStartup() {
			f.typed = true
		}
	}
	return n, nil
}

// Request tells a backend framer of whole client messages, in order.
func (f *framer) Request(msg []byte) {
	if f.frontend {
		return
	}
	Messages(msg, true, len(msg) > 0 && msg[0] == 0, func(m Message) bool {
		if m.Type == 0 && (m.Code == SSLRequestCode || m.Code == GSSENCRequestCode) {
			f.encAnswers++
		}
		return true
	})
}

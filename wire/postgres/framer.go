package postgres

import "fmt"

// Framer cuts one direction of a connection into whole messages, fed any
// split of its bytes. The zero value frames a server's stream; set
// Frontend for a client's.
type Framer struct {
	// Frontend frames what a client sends: untyped start-up packets first.
	Frontend bool
	// Limit bounds one message's length; 0 means DefaultLimit.
	Limit int

	typed  bool   // frontend: the StartupMessage has been seen
	sslAns bool   // backend: the next byte answers an SSLRequest or GSSENCRequest
	buf    []byte // bytes of a message not yet whole
	off    int    // bytes of buf already returned
	err    error
}

// Feed adds the next bytes of the stream. The framer copies them only when
// a message is left incomplete.
func (f *Framer) Feed(p []byte) {
	if f.off > 0 {
		f.buf = f.buf[:copy(f.buf, f.buf[f.off:])]
		f.off = 0
	}
	f.buf = append(f.buf, p...)
}

// AwaitEncryptionAnswer tells a server's framer that the client asked for
// TLS or GSS encryption: the next byte is the one-byte answer ('S', 'G' or
// 'N'), returned as a message of that type with an empty body.
func (f *Framer) AwaitEncryptionAnswer() { f.sslAns = true }

// Next returns the next whole message, or ok false when the bytes fed so
// far end inside one. The message's Body aliases the framer's buffer until
// the next Feed. After an error, Next keeps returning it.
func (f *Framer) Next() (m Message, ok bool, err error) {
	if f.err != nil {
		return Message{}, false, f.err
	}
	b := f.buf[f.off:]
	if !f.Frontend && f.sslAns {
		if len(b) == 0 {
			return Message{}, false, nil
		}
		f.sslAns = false
		f.off++
		return Message{Type: b[0]}, true, nil
	}
	m, n, err := Next(b, f.Frontend, f.Frontend && !f.typed, f.Limit)
	if err != nil {
		f.err = fmt.Errorf("%s message at stream byte %d: %w", f.side(), f.off, err)
		return Message{}, false, f.err
	}
	if n == 0 {
		return Message{}, false, nil
	}
	f.off += n
	if f.Frontend && m.IsStartup() {
		f.typed = true
	}
	return m, true, nil
}

// Buffered returns how many bytes of an incomplete message the framer
// holds.
func (f *Framer) Buffered() int { return len(f.buf) - f.off }

func (f *Framer) side() string {
	if f.Frontend {
		return "client"
	}
	return "server"
}

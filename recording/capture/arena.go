package capture

// arena hands out the bytes of a connection's payloads from shared chunks:
// a recorded call's request and answer are mostly a few small reads and
// writes, and giving each its own growing slice cost more allocations than
// anything else the recorder does. Slices handed out have no spare
// capacity, so an append by anyone else never writes into the chunk; the
// payload written last grows in place. Not safe for concurrent use: the
// owner's lock guards it.
type arena struct {
	buf  []byte   // current chunk; its length is the part handed out
	last *payload // the payload whose bytes end buf's used part
}

const (
	arenaChunk = 4 << 10
	arenaFirst = 512
	// arenaMax is the largest payload kept in a chunk; bigger ones grow
	// in their own allocation.
	arenaMax = arenaChunk / 2
)

// add appends b to p's bytes.
func (ar *arena) add(p *payload, b []byte) {
	if ar.last == p && len(ar.buf)+len(b) <= cap(ar.buf) {
		ar.buf = append(ar.buf, b...)
		end := len(ar.buf)
		p.b = ar.buf[end-len(p.b)-len(b) : end : end]
		return
	}
	if len(p.b)+len(b) > arenaMax {
		if ar.last == p {
			ar.last = nil
		}
		p.b = append(p.b, b...) // a chunk's slice has no room: this copies out of it
		return
	}
	if need := len(p.b) + len(b); len(ar.buf)+need > cap(ar.buf) {
		// chunks start small (a request's own payloads are a few hundred
		// bytes) and grow for busy connections
		ar.buf = make([]byte, 0, max(need, min(2*cap(ar.buf), arenaChunk), arenaFirst))
	}
	start := len(ar.buf)
	ar.buf = append(append(ar.buf, p.b...), b...)
	end := len(ar.buf)
	p.b = ar.buf[start:end:end]
	ar.last = p
}

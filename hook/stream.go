package hook

import (
	"github.com/retrace-dev/retrace/trace"
)

// holdLimit bounds the bytes a stream keeps while waiting for the end of a
// request head to know whose they are; past it they are handed on under
// the current trace.
const holdLimit = 64 << 10

// reqEvent is a request whose head one feed completed.
type reqEvent struct {
	start int    // index of its first byte in the feed's output; may be < 0
	tid   string // the trace its bytes are charged to (newStream's decide)
}

// stream follows one direction of one connection with an
// trace.InboundParser: it strips Retrace-* headers, reports request heads,
// and cuts the bytes at request boundaries so each piece can be charged to
// the request it belongs to. Not safe for concurrent use.
//
// Its own fields, the events of a feed that completes one request
// included, fill its first two lines, and the parser's follow, whose first
// 256 bytes are the ones a request in whole lines touches: a feed then
// reads and writes six lines of a stream (576 bytes, a size class of
// 64-byte aligned objects), and none of another object for its events.
type stream struct {
	cb     func(trace.RequestHead, int) // the parser's callback (see newStream)
	events []reqEvent                   // the last feed's, in ev unless it completed several
	out    []byte

	cur     string // trace of the request the next body bytes belong to
	hasCur  bool   // a request head has been seen
	holding bool   // held has the start of a head still in progress
	// writes: the stream follows what the application writes, and held
	// bytes wait to go out (not only to be reported)
	writes bool
	held   []byte
	ev     [1]reqEvent

	p trace.InboundParser
}

// newStream returns a stream for the bytes an application reads, or with
// writes set, for those it writes; decide gives each request its trace,
// from a head without its Path when noPath is set.
func newStream(writes, noPath bool, decide func(trace.RequestHead) string) *stream {
	s := &stream{writes: writes}
	s.p.NoPath = noPath
	s.events = s.ev[:0]
	// A request's trace is decided as soon as its head is complete, while
	// the head is at hand: a feed's events then keep only where each
	// request starts and its trace, in the stream's own lines when there
	// is one.
	s.cb = func(h trace.RequestHead, start int) {
		s.events = append(s.events, reqEvent{start: start, tid: decide(h)})
	}
	return s
}

// passThrough reports whether the parser gave up on the connection and
// nothing is held: bytes can then skip the stream entirely. Only under the
// stream's lock; see connState.passed.
func (s *stream) passThrough() bool { return s.p.PassThrough() && !s.holding }

// feed runs in through the parser and returns the bytes the other side
// must see; s.events has the requests whose heads it completed, with their
// traces. The result is valid until the next feed.
func (s *stream) feed(in []byte) []byte {
	s.out = s.parse(s.out[:0], in)
	if cap(s.out) > holdLimit && len(s.out) < holdLimit/4 {
		s.out = nil // don't keep a huge buffer for a connection's lifetime
	}
	return s.out
}

// feedRead is feed for bytes just read into b, which the application
// gets back in b: when nothing is held from the last read, the parser works
// in place (the bytes the application must see are then a prefix of b,
// and neither they nor the stream's buffer are copied), else as feed does.
func (s *stream) feedRead(b []byte) (out []byte, inPlace bool) {
	if s.p.Held() != 0 {
		return s.feed(b), false
	}
	return s.parse(b[:0], b), true
}

// parse runs in through the parser, appending what the other side must
// see to out, with s.events the requests whose heads it completed.
func (s *stream) parse(out, in []byte) []byte {
	s.events = s.events[:0]
	return s.p.Feed(out, in, s.cb)
}

// attribute hands emit the output of the last feed cut at request starts,
// each piece with the trace it is charged to: bytes before a request's
// first byte to the previous request, from it on to that request (its
// reqEvent.tid). Bytes that start a request whose head has not ended yet
// are kept until it ends, so a head split over several reads or writes is
// charged as a whole — also when the feed that started it ended the
// previous request (pipelining, or coalesced reads): the parser's
// HeadStart says where it began. fallback is the trace of bytes that
// belong to no request seen so far.
func (s *stream) attribute(out []byte, fallback func() string, emit func(tid string, b []byte)) {
	data, base := out, 0
	if s.holding {
		base = len(s.held)
		s.held = append(s.held, out...)
		data = s.held
	}
	cur := func() string {
		if s.hasCur {
			return s.cur
		}
		return fallback()
	}
	pos := 0
	for i := range s.events {
		at := min(max(s.events[i].start+base, pos), len(data))
		if at > pos {
			emit(cur(), data[pos:at])
		}
		s.cur, s.hasCur = s.events[i].tid, true
		pos = at
	}
	if start, ok := s.p.HeadStart(); ok && (!s.writes || s.p.LikelyHTTP()) {
		// a head in progress: from its first byte on, the bytes wait for
		// it to end and name its trace (up to holdLimit of them). Written
		// bytes wait to go out, so only once the head looks like HTTP (an
		// upper-case method and its space): the message of another
		// protocol would wait there for bytes that never come. HTTP
		// clients write the request line's start in one piece; reads, which
		// TCP may cut anywhere, are held from the first byte (only their
		// report waits).
		at := min(max(start+base, pos), len(data))
		if len(data)-at < holdLimit {
			if at > pos {
				emit(cur(), data[pos:at])
			}
			rest := data[at:]
			if s.holding {
				s.held = s.held[:copy(s.held, rest)] // rest is the tail of s.held
			} else {
				s.held = append(s.held[:0], rest...)
			}
			s.holding = true
			return
		}
	}
	if rest := data[pos:]; len(rest) > 0 {
		emit(cur(), rest)
	}
	s.holding = false
	if cap(s.held) > holdLimit {
		s.held = nil
	} else {
		s.held = s.held[:0]
	}
}

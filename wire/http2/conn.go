package http2

import (
	"fmt"
	"sort"

	"golang.org/x/net/http2"
)

// Conn follows both directions of one connection and reassembles its
// streams into exchanges. Feed each direction's bytes, in the order each
// side sent them, with Client and Server; the two directions may be fed in
// any interleaving. Not safe for concurrent use.
type Conn struct {
	client, server *Reader
	streams        map[uint32]*Exchange
	done           []*Exchange
	// Streams finished: every client stream below floor, and those in
	// closed. Either direction may open a stream (the directions may be
	// fed in any interleaving, so a response can come before its
	// request), but never one that finished.
	floor  uint32
	closed map[uint32]bool
	// OnFrame, when set, sees every frame of either direction as it is
	// framed (after the stream's exchange was updated).
	OnFrame func(from Side, f *Frame, x *Exchange)
	// MaxData bounds the data kept per half of a stream; 0 means 64 MiB.
	MaxData int
	// Truncate keeps a half's data to MaxData and drops the rest (the half
	// is then marked Truncated) instead of failing the connection: a
	// recorder follows a connection whatever its streams carry.
	Truncate bool
	// KeepData, when set, is asked as each stream opens how many bytes of
	// data each of its halves keeps (a recorder's sampling and body cap);
	// negative means no bound but MaxData. The bytes beyond are counted
	// in the half's Dropped, not kept, and the stream is followed as any.
	KeepData func(stream uint32) int
}

// NewConn returns a Conn whose client side starts with the preface.
func NewConn(lim Limits) *Conn {
	return &Conn{
		client:  NewReader(Client, lim),
		server:  NewReader(Server, lim),
		streams: map[uint32]*Exchange{},
		floor:   1,
		closed:  map[uint32]bool{},
	}
}

// Upgraded returns a Conn for a connection that switched from HTTP/1.1 by
// an h2c Upgrade: stream 1 already holds the request (its half ended),
// and the client's bytes still begin with the preface.
func Upgraded(lim Limits, req Message) *Conn {
	c := NewConn(lim)
	req.End = true
	c.streams[1] = &Exchange{StreamID: 1, Request: req}
	return c
}

// Reader returns the Reader of a side's bytes.
func (c *Conn) Reader(s Side) *Reader {
	if s == Client {
		return c.client
	}
	return c.server
}

// Client feeds bytes the client sent.
func (c *Conn) Client(p []byte) error { return c.feed(Client, p) }

// Server feeds bytes the server sent.
func (c *Conn) Server(p []byte) error { return c.feed(Server, p) }

func (c *Conn) feed(s Side, p []byte) error {
	r := c.Reader(s)
	r.Feed(p)
	for {
		f, err := r.Next()
		if err != nil {
			return err
		}
		if f == nil {
			return nil
		}
		x, err := c.apply(s, f)
		if err != nil {
			return fmt.Errorf("http2: %s %s frame of stream %d: %w", s, f.Type, f.StreamID, err)
		}
		if c.OnFrame != nil {
			c.OnFrame(s, f, x)
		}
		if x != nil && x.done() {
			c.finish(x)
		}
	}
}

// apply updates the connection's streams with a frame.
func (c *Conn) apply(s Side, f *Frame) (*Exchange, error) {
	switch f.Type {
	case http2.FrameSettings:
		if !f.Ack {
			for _, st := range f.Settings {
				if st.ID == http2.SettingHeaderTableSize {
					// The sender of the SETTINGS decodes what the other
					// side encodes.
					c.Reader(other(s)).SetTableLimit(st.Val)
				}
			}
		}
		return nil, nil
	case http2.FrameGoAway:
		c.goAway(s, f.LastStream)
		return nil, nil
	case http2.FramePushPromise:
		if s != Server {
			return nil, fmt.Errorf("PUSH_PROMISE sent by the client")
		}
		x := &Exchange{StreamID: f.PromiseID, Promised: true}
		x.Request.Header, x.Request.End = f.Fields, true
		c.streams[f.PromiseID] = x
		return c.stream(f.StreamID, s), nil
	case http2.FrameHeaders, http2.FrameData, http2.FrameRSTStream:
	default:
		return nil, nil
	}
	x := c.stream(f.StreamID, s)
	if x == nil {
		return nil, nil // a frame of a stream already closed (a late DATA after a reset)
	}
	m := &x.Request
	if s == Server {
		m = &x.Response
	}
	switch f.Type {
	case http2.FrameHeaders:
		m.addHeaders(f.Fields, s == Server)
	case http2.FrameData:
		switch limit := c.maxData(); {
		case x.bounded && len(m.Data)+len(f.Data) > x.keep:
			n := max(0, x.keep-len(m.Data))
			m.Data = append(m.Data, f.Data[:n]...)
			m.Dropped += len(f.Data) - n
		case len(m.Data)+len(f.Data) > limit:
			if !c.Truncate {
				return x, fmt.Errorf("more than %d bytes of data", limit)
			}
			n := max(0, limit-len(m.Data))
			m.Data, m.Truncated = append(m.Data, f.Data[:n]...), true
		default:
			m.Data = append(m.Data, f.Data...)
		}
		if s == Server && len(f.Data) > 0 {
			x.mark()
		}
	case http2.FrameRSTStream:
		x.Reset = &Reset{By: s, Code: f.Code}
	}
	if f.EndStream {
		m.End = true
	}
	return x, nil
}

// stream returns the exchange of stream id, opening a client stream that
// has not finished; nil for a stream that is gone.
func (c *Conn) stream(id uint32, _ Side) *Exchange {
	if x := c.streams[id]; x != nil {
		return x
	}
	if id%2 == 0 || id < c.floor || c.closed[id] {
		return nil
	}
	x := &Exchange{StreamID: id}
	if c.KeepData != nil {
		if n := c.KeepData(id); n >= 0 {
			x.bounded, x.keep = true, n
		}
	}
	c.streams[id] = x
	return x
}

// finish hands a stream over and remembers it is gone.
func (c *Conn) finish(x *Exchange) {
	delete(c.streams, x.StreamID)
	c.done = append(c.done, x)
	if x.StreamID%2 == 0 {
		return
	}
	c.closed[x.StreamID] = true
	for c.closed[c.floor] {
		delete(c.closed, c.floor)
		c.floor += 2
	}
}

func (c *Conn) maxData() int {
	if c.MaxData > 0 {
		return c.MaxData
	}
	return 64 << 20
}

// goAway ends the streams the GOAWAY's sender will not process: those the
// other side opened above last.
func (c *Conn) goAway(from Side, last uint32) {
	for id, x := range c.streams {
		mine := id%2 == 0 // streams the server opened
		if from == Client {
			mine = !mine
		}
		if !mine && id > last {
			x.Unfinished = fmt.Sprintf("GOAWAY from the %s with last stream %d", from, last)
			c.finish(x)
		}
	}
}

func other(s Side) Side { return 1 - s }

// Exchanges returns the streams finished since the last call, in the order
// they finished.
func (c *Conn) Exchanges() []*Exchange {
	d := c.done
	c.done = nil
	return d
}

// Open returns the stream with id in progress, or nil.
func (c *Conn) Open(id uint32) *Exchange { return c.streams[id] }

// Close ends the connection: the streams finished and not yet taken, then
// those in progress, in stream order, marked with why.
func (c *Conn) Close(why string) []*Exchange {
	out := c.Exchanges()
	ids := make([]uint32, 0, len(c.streams))
	for id := range c.streams {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		x := c.streams[id]
		x.Unfinished = why
		out = append(out, x)
		delete(c.streams, id)
	}
	return out
}

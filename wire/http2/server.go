package http2

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// ServerConfig is what a ServerConn advertises. The zero value of each field
// means the default named on it.
type ServerConfig struct {
	// MaxFrame is SETTINGS_MAX_FRAME_SIZE; 0 means 16384.
	MaxFrame uint32
	// MaxConcurrentStreams is SETTINGS_MAX_CONCURRENT_STREAMS; 0 means 1000.
	MaxConcurrentStreams uint32
	// Window is the receive window of the connection and of every stream;
	// 0 means 1 MiB. Data the client sends is credited back as soon as it is
	// read, so the client is never blocked by the mock.
	Window uint32
	// MaxHeaderBlock bounds a request's header block; 0 means 1 MiB.
	MaxHeaderBlock int
	// MaxData bounds a request's data; 0 means 64 MiB.
	MaxData int
}

func (c ServerConfig) withDefaults() ServerConfig {
	if c.MaxFrame == 0 {
		c.MaxFrame = 16384
	}
	c.MaxFrame = min(max(c.MaxFrame, 16384), 1<<24-1)
	if c.MaxConcurrentStreams == 0 {
		c.MaxConcurrentStreams = 1000
	}
	if c.Window == 0 {
		c.Window = 1 << 20
	}
	c.Window = min(max(c.Window, 65535), 1<<31-1)
	if c.MaxHeaderBlock <= 0 {
		c.MaxHeaderBlock = 1 << 20
	}
	if c.MaxData <= 0 {
		c.MaxData = 64 << 20
	}
	return c
}

// Request is a stream as a ServerConn has read it so far.
type Request struct {
	StreamID uint32
	Message
	// Ended: the client's half is closed (END_STREAM); otherwise only the
	// headers are in (a streaming call's request as it opens).
	Ended bool
	// Gone: the stream is over before its request ended, or ended
	// without an answer: reset by the client or by the ServerConn (a
	// protocol error on the stream, a request beyond MaxData), or
	// answered whole while the client was still sending. Nothing more
	// comes of it.
	Gone bool
}

// ErrGoAway reports a connection that the client ended with GOAWAY, or
// that the ServerConn ended because of a protocol error (then wrapped with
// the reason).
var ErrGoAway = errors.New("http2: connection going away")

// errPeerGoAway is the client's GOAWAY.
var errPeerGoAway = fmt.Errorf("%w: client sent GOAWAY", ErrGoAway)

// ServerConn is the server side of one HTTP/2 connection, without I/O:
// Feed it what the client sent and write what Output returns. It keeps the
// HPACK state of both directions, answers SETTINGS and PING, credits the
// client's data with WINDOW_UPDATE, respects the client's flow-control
// windows and frame size when it sends a response, and resets or refuses
// streams with RST_STREAM and GOAWAY. Not safe for concurrent use.
type ServerConn struct {
	cfg ServerConfig
	r   *Reader
	out bytes.Buffer
	fw  *http2.Framer
	enc *hpack.Encoder
	hb  bytes.Buffer

	streams map[uint32]*serverStream
	lastID  uint32     // highest client stream opened
	gone    []*Request // streams over since the last Feed returned

	// Send side: the client's settings and windows.
	peerFrame   uint32
	peerInitial int64
	connWindow  int64
	goneAway    bool
	greeted     bool
}

type serverStream struct {
	id       uint32
	req      Request
	window   int64 // send window
	pending  []byte
	trailer  []hpack.HeaderField // sent once pending is flushed
	answered bool                // headers sent
	endSent  bool
}

// NewServerConn returns the server side of a connection; its first Output
// holds the server's SETTINGS.
func NewServerConn(cfg ServerConfig) *ServerConn {
	cfg = cfg.withDefaults()
	s := &ServerConn{
		cfg:         cfg,
		r:           NewReader(Client, Limits{MaxFrame: cfg.MaxFrame, MaxHeaderBlock: cfg.MaxHeaderBlock, MaxTable: 4096}),
		streams:     map[uint32]*serverStream{},
		peerFrame:   16384,
		peerInitial: 65535,
		connWindow:  65535,
	}
	s.fw = http2.NewFramer(&s.out, nil)
	s.enc = hpack.NewEncoder(&s.hb)
	s.greet()
	return s
}

func (s *ServerConn) greet() {
	if s.greeted {
		return
	}
	s.greeted = true
	_ = s.fw.WriteSettings(
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: s.cfg.MaxFrame},
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: s.cfg.MaxConcurrentStreams},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: s.cfg.Window},
	)
	if s.cfg.Window > 65535 {
		_ = s.fw.WriteWindowUpdate(0, s.cfg.Window-65535)
	}
}

// Upgraded opens stream 1 with the request of an h2c Upgrade (its half
// ended) and returns it: the caller answers it like any other request.
// The client still sends the preface next.
func (s *ServerConn) Upgraded(m Message) *Request {
	st := s.open(1)
	st.req.Message, st.req.End, st.req.Ended = m, true, true
	return &st.req
}

// Output returns the bytes to send to the client and forgets them.
func (s *ServerConn) Output() []byte {
	if s.out.Len() == 0 {
		return nil
	}
	b := bytes.Clone(s.out.Bytes())
	s.out.Reset()
	return b
}

// Feed reads bytes the client sent and returns the streams whose request
// changed: opened (headers in), got data, ended (Ended), or over (Gone;
// also those a Respond closed since the last Feed). Each stream is
// returned once per call, in the order it first changed. After an error,
// Output holds the GOAWAY to send before closing.
func (s *ServerConn) Feed(p []byte) ([]*Request, error) {
	s.r.Feed(p)
	var reqs []*Request
	for {
		f, err := s.r.Next()
		if err != nil {
			return s.withGone(reqs), s.fail(http2.ErrCodeProtocol, err)
		}
		if f == nil {
			s.flush()
			return s.withGone(reqs), nil
		}
		r, err := s.apply(f)
		if err != nil {
			return s.withGone(reqs), err
		}
		if r != nil && !slices.Contains(reqs, r) {
			reqs = append(reqs, r)
		}
	}
}

// withGone adds the streams over since the last Feed to reqs.
func (s *ServerConn) withGone(reqs []*Request) []*Request {
	for _, g := range s.gone {
		if !slices.Contains(reqs, g) {
			reqs = append(reqs, g)
		}
	}
	s.gone = s.gone[:0]
	return reqs
}

// over marks a stream's request Gone, to be returned by the next Feed.
func (s *ServerConn) over(st *serverStream) {
	if !st.req.Gone {
		st.req.Gone = true
		s.gone = append(s.gone, &st.req)
	}
}

// fail ends the connection with a GOAWAY naming the error.
func (s *ServerConn) fail(code http2.ErrCode, err error) error {
	var ce http2.ConnectionError
	if errors.As(err, &ce) {
		code = http2.ErrCode(ce)
	}
	if !s.goneAway {
		s.goneAway = true
		_ = s.fw.WriteGoAway(s.lastID, code, []byte(truncate(err.Error(), 256)))
	}
	return fmt.Errorf("%w: %w", ErrGoAway, err)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func (s *ServerConn) apply(f *Frame) (*Request, error) {
	switch f.Type {
	case http2.FrameSettings:
		if !f.Ack {
			if err := s.settings(f.Settings); err != nil {
				return nil, err
			}
			_ = s.fw.WriteSettingsAck()
		}
	case http2.FramePing:
		if !f.Ack {
			_ = s.fw.WritePing(true, f.Ping)
		}
	case http2.FrameWindowUpdate:
		if f.StreamID == 0 {
			s.connWindow += int64(f.Increment)
			if s.connWindow > 1<<31-1 {
				return nil, s.fail(http2.ErrCodeFlowControl, errors.New("connection window above 2^31-1"))
			}
		} else if st := s.streams[f.StreamID]; st != nil {
			st.window += int64(f.Increment)
			if st.window > 1<<31-1 {
				s.reset(st, http2.ErrCodeFlowControl)
			}
		}
	case http2.FrameGoAway:
		s.goneAway = true
		return nil, fmt.Errorf("%w (%v)", errPeerGoAway, f.Code)
	case http2.FrameRSTStream:
		if st := s.streams[f.StreamID]; st != nil {
			s.over(st)
			delete(s.streams, f.StreamID)
		}
	case http2.FrameHeaders:
		return s.headers(f)
	case http2.FrameData:
		return s.data(f)
	case http2.FramePushPromise:
		return nil, s.fail(http2.ErrCodeProtocol, errors.New("client sent PUSH_PROMISE"))
	}
	return nil, nil
}

func (s *ServerConn) settings(list []http2.Setting) error {
	for _, st := range list {
		if err := st.Valid(); err != nil {
			return s.fail(http2.ErrCodeProtocol, err)
		}
		switch st.ID {
		case http2.SettingHeaderTableSize:
			s.enc.SetMaxDynamicTableSizeLimit(st.Val)
		case http2.SettingMaxFrameSize:
			s.peerFrame = st.Val
		case http2.SettingInitialWindowSize:
			delta := int64(st.Val) - s.peerInitial
			s.peerInitial = int64(st.Val)
			for _, ss := range s.streams {
				ss.window += delta
			}
		}
	}
	return nil
}

func (s *ServerConn) open(id uint32) *serverStream {
	st := &serverStream{id: id, window: s.peerInitial}
	st.req.StreamID = id
	s.streams[id] = st
	s.lastID = max(s.lastID, id)
	return st
}

func (s *ServerConn) headers(f *Frame) (*Request, error) {
	st := s.streams[f.StreamID]
	if st == nil {
		if f.StreamID%2 == 0 || f.StreamID <= s.lastID {
			// A stream closed or never the client's: RFC 9113 5.1.1.
			return nil, s.fail(http2.ErrCodeProtocol, fmt.Errorf("HEADERS on stream %d, not a new client stream", f.StreamID))
		}
		if s.goneAway {
			_ = s.fw.WriteRSTStream(f.StreamID, http2.ErrCodeRefusedStream)
			return nil, nil
		}
		if uint32(len(s.streams)) >= s.cfg.MaxConcurrentStreams {
			s.lastID = f.StreamID
			_ = s.fw.WriteRSTStream(f.StreamID, http2.ErrCodeRefusedStream)
			return nil, nil
		}
		st = s.open(f.StreamID)
	} else if st.req.End {
		s.reset(st, http2.ErrCodeStreamClosed)
		return nil, nil
	}
	st.req.addHeaders(f.Fields, false)
	if f.EndStream {
		st.req.End, st.req.Ended = true, true
	}
	return &st.req, nil
}

func (s *ServerConn) data(f *Frame) (*Request, error) {
	if f.Length > 0 {
		// Credit what was read at once: the mock never applies back
		// pressure.
		_ = s.fw.WriteWindowUpdate(0, f.Length)
	}
	st := s.streams[f.StreamID]
	switch {
	case st == nil && f.StreamID > s.lastID:
		return nil, s.fail(http2.ErrCodeProtocol, fmt.Errorf("DATA on idle stream %d", f.StreamID))
	case st == nil:
		return nil, nil // a stream already reset or finished: RFC 9113 5.4.2
	case st.req.End:
		s.reset(st, http2.ErrCodeStreamClosed)
		return nil, nil
	}
	if len(st.req.Data)+len(f.Data) > s.cfg.MaxData {
		s.reset(st, http2.ErrCodeRefusedStream)
		return nil, nil
	}
	st.req.Data = append(st.req.Data, f.Data...)
	if f.EndStream {
		st.req.End, st.req.Ended = true, true
	} else if f.Length > 0 {
		_ = s.fw.WriteWindowUpdate(f.StreamID, f.Length)
	}
	if len(f.Data) == 0 && !f.EndStream {
		return nil, nil
	}
	return &st.req, nil
}

// Respond sends a response on a stream: its header block at once (interim
// blocks first), its data as the client's windows allow, then its trailer
// (or END_STREAM on the last data). A response without End leaves the
// stream open for more: call Respond again with data (and no Header) for a
// streaming answer. Responding to a stream that is gone (reset by the
// client) does nothing.
func (s *ServerConn) Respond(id uint32, m Message) error {
	st := s.streams[id]
	if st == nil {
		return nil
	}
	if st.endSent || st.trailer != nil {
		return fmt.Errorf("http2: stream %d already answered", id)
	}
	if !st.answered {
		for _, h := range m.Interim {
			if err := s.writeBlock(id, h, false); err != nil {
				return err
			}
		}
		if m.Header == nil {
			return fmt.Errorf("http2: response on stream %d has no header block", id)
		}
		endNow := m.End && len(m.Data) == 0 && m.Trailer == nil
		if err := s.writeBlock(id, m.Header, endNow); err != nil {
			return err
		}
		st.answered = true
		if endNow {
			st.endSent = true
			s.finish(st)
			return nil
		}
	}
	st.pending = append(st.pending, m.Data...)
	if m.End {
		st.trailer = m.Trailer
		if st.trailer == nil {
			st.trailer = []hpack.HeaderField{} // END_STREAM on the last data
		}
	}
	s.flush()
	return nil
}

// Reset ends a stream with RST_STREAM.
func (s *ServerConn) Reset(id uint32, code http2.ErrCode) {
	if st := s.streams[id]; st != nil {
		s.reset(st, code)
	}
}

func (s *ServerConn) reset(st *serverStream, code http2.ErrCode) {
	_ = s.fw.WriteRSTStream(st.id, code)
	s.over(st)
	delete(s.streams, st.id)
}

// GoAway tells the client no stream above the last opened will be served.
func (s *ServerConn) GoAway(code http2.ErrCode, why string) {
	if !s.goneAway {
		s.goneAway = true
		_ = s.fw.WriteGoAway(s.lastID, code, []byte(truncate(why, 256)))
	}
}

// Streams is the number of streams open.
func (s *ServerConn) Streams() int { return len(s.streams) }

// writeBlock encodes a header block and writes it as HEADERS and as many
// CONTINUATION frames as the client's frame size needs.
func (s *ServerConn) writeBlock(id uint32, fields []hpack.HeaderField, end bool) error {
	s.hb.Reset()
	for _, f := range fields {
		if err := s.enc.WriteField(f); err != nil {
			return fmt.Errorf("http2: encoding header %q of stream %d: %w", f.Name, id, err)
		}
	}
	return writeHeaderBlock(s.fw, id, s.hb.Bytes(), end, s.peerFrame)
}

// writeHeaderBlock writes block as a HEADERS frame and CONTINUATIONs of at
// most maxFrame bytes each.
func writeHeaderBlock(fw *http2.Framer, id uint32, block []byte, end bool, maxFrame uint32) error {
	first := block[:min(len(block), int(maxFrame))]
	rest := block[len(first):]
	if err := fw.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: end, EndHeaders: len(rest) == 0}); err != nil {
		return err
	}
	for len(rest) > 0 {
		n := min(len(rest), int(maxFrame))
		if err := fw.WriteContinuation(id, n == len(rest), rest[:n]); err != nil {
			return err
		}
		rest = rest[n:]
	}
	return nil
}

// flush sends the data the windows allow, in stream order of arrival, and
// the trailers of streams whose data is out.
func (s *ServerConn) flush() {
	for _, st := range s.streams {
		s.flushStream(st)
	}
}

func (s *ServerConn) flushStream(st *serverStream) {
	for len(st.pending) > 0 && s.connWindow > 0 && st.window > 0 {
		n := min(int64(len(st.pending)), s.connWindow, st.window, int64(s.peerFrame))
		last := int(n) == len(st.pending) && st.trailer != nil && len(st.trailer) == 0
		_ = s.fw.WriteData(st.id, last, st.pending[:n])
		st.pending = st.pending[n:]
		s.connWindow -= n
		st.window -= n
		if last {
			st.endSent = true
			s.finish(st)
			return
		}
	}
	if len(st.pending) == 0 {
		st.pending = nil
		if st.trailer != nil && !st.endSent {
			if len(st.trailer) == 0 {
				_ = s.fw.WriteData(st.id, true, nil)
			} else if err := s.writeBlock(st.id, st.trailer, true); err != nil {
				s.reset(st, http2.ErrCodeInternal)
				return
			}
			st.endSent = true
			s.finish(st)
		}
	}
}

// finish forgets a stream whose both halves are closed. A response that
// ends before its request half does (a server answering early) leaves the
// stream to be closed by the client's END_STREAM or RST_STREAM; its later
// frames are then ignored.
func (s *ServerConn) finish(st *serverStream) {
	if st.req.End {
		delete(s.streams, st.id)
		return
	}
	// RFC 9113 8.1: a server may end its response before the request ends;
	// it should then reset the stream with NO_ERROR so the client stops
	// sending.
	_ = s.fw.WriteRSTStream(st.id, http2.ErrCodeNo)
	s.over(st)
	delete(s.streams, st.id)
}

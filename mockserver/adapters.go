package mockserver

import (
	"net"
	"sync/atomic"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/protocols"
)

// Protocol names, as in recording.Call.Proto.
const (
	protoHTTP  = recording.ProtoHTTP
	protoRedis = recording.ProtoRedis
	protoMySQL = recording.ProtoMySQL
	protoRaw   = recording.ProtoRaw
)

// connIDs numbers live connections for the protocols that tell a client
// its connection id (MySQL).
var connIDs atomic.Uint32

// newAnswerer returns the protocol state of c, which speaks proto.
func (c *conn) newAnswerer(proto wire.Protocol) wire.Answerer {
	c.proto = proto
	return proto.NewAnswerer(wire.Env{
		Book:       lockedBook{ix: c.s.idx, dst: c.dst, proto: proto},
		MaxMessage: c.s.cfg.MaxMessage,
		TraceID:    func() string { return c.msgTID },
		ConnID:     connIDs.Add(1),
	})
}

// lockedBook reads the book of dst under the index's lock: recordings
// loaded later write to it.
type lockedBook struct {
	ix    *index
	dst   string
	proto wire.Protocol
}

func (b lockedBook) Learn(wire.Call) {}

func (b lockedBook) Greeting(connID uint32) []byte {
	b.ix.mu.RLock()
	defer b.ix.mu.RUnlock()
	if d := b.ix.dsts[b.dst]; d != nil {
		return d.book.Greeting(connID)
	}
	// no recording names the destination: the protocol's own default
	return b.proto.NewBook().Greeting(connID)
}

func (b lockedBook) Fallback(r *wire.Request) ([]byte, int, bool) {
	b.ix.mu.RLock()
	defer b.ix.mu.RUnlock()
	if d := b.ix.dsts[b.dst]; d != nil {
		return d.book.Fallback(r)
	}
	return nil, 0, false
}

// protoFor returns the protocol to speak with dst: what its recordings say,
// else a protocol whose server speaks first by its well-known port (MySQL
// for 3306: there is nothing to detect from), else "" (detect from the
// first request).
func (s *Server) protoFor(dst string) string {
	if d := s.idx.dst(dst); d != nil {
		return d.proto
	}
	if _, port, err := net.SplitHostPort(dst); err == nil {
		if p, ok := protocols.All.ForPort(port); ok {
			return p.Name()
		}
	}
	return ""
}

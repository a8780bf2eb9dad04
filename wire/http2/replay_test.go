package http2_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/wire/http2"
)

// player answers a connection's streams from recorded exchanges: a stream
// is matched, when its headers are in, to the next unused exchange of the
// same x-trace and path, and answered as the recording's pace allows.
type player struct {
	mu   sync.Mutex
	left map[string][]*http2.Exchange // by x-trace and path, in stream order
	errs []error
}

func newPlayer(xs []*http2.Exchange) *player {
	p := &player{left: map[string][]*http2.Exchange{}}
	for _, x := range xs {
		k := playKey(x.Request.Header)
		p.left[k] = append(p.left[k], x)
	}
	for _, l := range p.left {
		sortByStream(l)
	}
	return p
}

func playKey(h []hpack.HeaderField) string {
	tag, _ := http2.Get(h, "x-trace")
	path, _ := http2.Get(h, ":path")
	return tag + " " + path
}

func (p *player) take(h []hpack.HeaderField) *http2.Exchange {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := playKey(h)
	l := p.left[k]
	if len(l) == 0 {
		p.errs = append(p.errs, fmt.Errorf("no recorded exchange left for %s", k))
		return nil
	}
	p.left[k] = l[1:]
	return l[0]
}

type playing struct {
	x        *http2.Exchange
	sent     int
	answered bool
}

// serve runs one connection of the mock until the client goes.
func (p *player) serve(c net.Conn, cfg http2.ServerConfig) error {
	defer c.Close()
	sc := http2.NewServerConn(cfg)
	streams := map[uint32]*playing{}
	buf := make([]byte, 32<<10)
	for {
		if out := sc.Output(); out != nil {
			if _, err := c.Write(out); err != nil {
				return err
			}
		}
		n, err := c.Read(buf)
		if n == 0 && err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		reqs, ferr := sc.Feed(buf[:n])
		for _, r := range reqs {
			pl := streams[r.StreamID]
			if pl == nil {
				x := p.take(r.Header)
				if x == nil {
					sc.Reset(r.StreamID, 0x2)
					continue
				}
				pl = &playing{x: x}
				streams[r.StreamID] = pl
			}
			due := pl.x.Due(len(r.Data), r.Ended)
			if due == pl.sent && !r.Ended {
				continue
			}
			m := http2.Message{Data: pl.x.Response.Data[pl.sent:due]}
			if !pl.answered {
				m.Header, m.Interim = pl.x.Response.Header, pl.x.Response.Interim
			}
			if r.Ended {
				m.End, m.Trailer = true, pl.x.Response.Trailer
				delete(streams, r.StreamID)
			}
			if err := sc.Respond(r.StreamID, m); err != nil {
				return err
			}
			pl.sent, pl.answered = due, true
		}
		if ferr != nil {
			if out := sc.Output(); out != nil {
				_, _ = c.Write(out)
			}
			if errors.Is(ferr, http2.ErrGoAway) {
				return nil
			}
			return ferr
		}
	}
}

// mockListener serves a player on a loopback listener.
func mockListener(t *testing.T, p *player, cfg http2.ServerConfig) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := p.serve(c, cfg); err != nil {
					errs <- err
				}
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("mock: %v", err)
		}
	})
	return l.Addr().String()
}

// TestServerConnReplaysGRPC records real grpc-go calls, stops the real
// server, and has a real grpc-go client make the same calls against a
// ServerConn answering from the recording: every answer must be what the
// real server sent (grpctest.Exercise checks payloads, statuses,
// streaming and bidirectional calls).
func TestServerConnReplaysGRPC(t *testing.T) {
	tags := make([]string, 16)
	for i := range tags {
		tags[i] = fmt.Sprintf("replay-%02d", i)
	}
	xs := feedLog(t, recordGRPC(t, tags).chunks(), rand.New(rand.NewPCG(3, 4)), 1500)
	for _, tc := range []struct {
		name string
		cfg  http2.ServerConfig
		opts []grpc.DialOption
	}{
		{name: "defaults"},
		{name: "small windows and frames", cfg: http2.ServerConfig{Window: 65535},
			opts: []grpc.DialOption{grpc.WithInitialWindowSize(65535), grpc.WithInitialConnWindowSize(65535), grpc.WithReadBufferSize(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPlayer(xs)
			addr := mockListener(t, p, tc.cfg)
			cc, err := grpc.NewClient(addr, append(tc.opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			for _, tag := range tags {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := grpctest.Exercise(ctx, cc, tag); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			if err := cc.Close(); err != nil {
				t.Fatal(err)
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			for _, err := range p.errs {
				t.Error(err)
			}
			for k, l := range p.left {
				if len(l) > 0 {
					t.Errorf("%s: %d recorded exchanges not replayed", k, len(l))
				}
			}
		})
	}
}

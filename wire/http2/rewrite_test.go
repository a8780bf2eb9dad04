package http2_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/wire/http2"
	"github.com/retrace-dev/retrace/wire/http2/inband"
)

// rewritingConn is a client's connection whose writes go through a
// Rewriter that removes retrace-* fields.
type rewritingConn struct {
	net.Conn
	mu     sync.Mutex
	rw     *inband.Rewriter
	traces map[uint32]string
}

func (c *rewritingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out, blocks, err := c.rw.Write(p)
	if err != nil {
		return 0, err
	}
	for _, b := range blocks {
		if tid := b.Trace(); tid != "" {
			c.traces[b.Stream] = tid
		}
	}
	if _, err := c.Conn.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

func dropRetrace(name string) bool { return inband.IsRetrace(name) }

// TestRewriterStripsTraces runs 64 traces over one grpc-go ClientConn,
// each call carrying its trace as retrace-trace-id metadata, through a
// Rewriter: the real server must answer every call (its HPACK decoder
// stays in step), never see a retrace-* field, and the Rewriter must have
// learnt each stream's own trace.
func TestRewriterStripsTraces(t *testing.T) {
	l := listenTap(t)
	svc := grpctest.Serve(t, l)
	var conns []*rewritingConn
	var mu sync.Mutex
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		rc := &rewritingConn{Conn: c, rw: inband.NewRewriter(true), traces: map[uint32]string{}}
		mu.Lock()
		conns = append(conns, rc)
		mu.Unlock()
		return rc, nil
	}
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dial))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tag := fmt.Sprintf("t%02d", i)
			// Random extra metadata so that blocks differ in what the
			// dynamic table holds.
			c := metadata.AppendToOutgoingContext(ctx, "retrace-trace-id", tag, "x-pad", strings.Repeat("p", rand.IntN(300)))
			if _, err := grpctest.Exercise(c, cc, tag); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if err := cc.Close(); err != nil {
		t.Fatal(err)
	}
	for _, md := range svc.Seen {
		for k := range md {
			if strings.HasPrefix(k, "retrace-") {
				t.Fatalf("the server saw %s", k)
			}
		}
	}
	if len(svc.Seen) != 4*n { // Exercise's four TestService calls (health not counted)
		t.Fatalf("%d calls reached the service, want %d", len(svc.Seen), 4*n)
	}
	if len(conns) != 1 || len(l.taps()) != 1 {
		t.Fatalf("%d connections", len(conns))
	}
	time.Sleep(20 * time.Millisecond)
	xs := feedLog(t, l.taps()[0].chunks(), rand.New(rand.NewPCG(1, 1)), 4096)
	if len(xs) != 5*n {
		t.Fatalf("%d exchanges, want %d", len(xs), 5*n)
	}
	for _, x := range xs {
		tag, _ := http2.Get(x.Request.Header, "x-trace")
		if got := conns[0].traces[x.StreamID]; got != tag {
			t.Fatalf("stream %d of %s attributed to %q", x.StreamID, tag, got)
		}
		if _, ok := http2.Get(x.Request.Header, "retrace-trace-id"); ok {
			t.Fatalf("stream %d: retrace-trace-id reached the wire", x.StreamID)
		}
	}
	if conns[0].rw.Rewritten < 5*n {
		t.Fatalf("%d blocks rewritten", conns[0].rw.Rewritten)
	}
}

package wiretest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/agenttest"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/recording/capture"
	"github.com/retrace-dev/retrace/trace"
)

// Scenario is a real downstream of one protocol and a client of it that
// keeps a pool of connections.
type Scenario struct {
	// Proto is what the calls to Dst must be recorded as.
	Proto string
	// Dst is the real server, as the client dials it.
	Dst string
	// Stop stops the real server once the recording is made: the replay
	// runs without it.
	Stop func()
	// NewClient returns a client with a pool of connections to Dst (one
	// for the recording, one for the replay).
	NewClient func(dst string) Client
	// Traces is how many requests run at once (32 when 0).
	Traces int
	// Mask, when set, masks the recording as RETRACE_MASK would
	// (recording.PipelineConfig.Mask): nothing may be skipped, and the
	// replay must give Masked(answer) for each answer the service gave
	// when recorded, from answers that masking rewrote, so every masked
	// message must still be one the client reads.
	Mask   *recording.Masker
	Masked func(answer string) string
}

// Client is a pooled client of the protocol.
type Client interface {
	// Call makes the n-th call of request i (0 from the handler, 1 from
	// its child goroutine, 2 from the grandchild) and returns the answer
	// as the application sees it.
	Call(ctx context.Context, i, n int) (string, error)
	Close()
}

// RecordReplay records requests of a service that calls sc.Dst from a
// handler, a child goroutine and a grandchild, sc.Traces at a time, under
// the agent in record mode; checks that the recording names sc.Proto and
// holds each request's calls; stops the server; then replays every
// request through the agent against the mock server and checks each got
// its recorded answer, no mock was missing, and nothing hung.
func RecordReplay(t *testing.T, sc Scenario) {
	t.Helper()
	ctx := context.Background()
	traces := sc.Traces
	if traces == 0 {
		traces = 32
	}
	tids := make([]string, traces)
	for i := range tids {
		tids[i] = trace.NewID()
	}
	dir := t.TempDir()
	store, err := recording.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	sampler, _ := recording.NewSampler(1)
	pipe, err := recording.NewPipeline(recording.PipelineConfig{Store: store, Sampler: sampler, Decode: capture.Decode, Mask: sc.Mask})
	if err != nil {
		t.Fatal(err)
	}
	recorder, err := capture.New(capture.Config{Pipeline: pipe, App: "wiretest-" + sc.Proto})
	if err != nil {
		t.Fatal(err)
	}

	undo, err := hook.Install(hook.Config{Mode: hook.Record, Recorder: recorder})
	if err != nil {
		t.Fatalf("installing the agent: %v", err)
	}
	want := serve(t, listen(t), sc, traces, func(i int) string {
		return fmt.Sprintf("traceparent: 00-%s-%016x-01", tids[i], i+1)
	})
	undo()
	if err := recorder.Close(ctx); err != nil {
		t.Fatal(err)
	}
	sc.Stop()
	for i, w := range want {
		if strings.Count(w, "|") != 2 {
			t.Fatalf("recording request %d: %s", i, w)
		}
		if sc.Masked != nil {
			want[i] = sc.Masked(w)
		}
	}
	if st := pipe.Stats(); sc.Mask != nil && (st.MaskSkipped != 0 || st.Masked == 0) {
		t.Fatalf("masking: %d sessions masked, %d payloads skipped", st.Masked, st.MaskSkipped)
	}

	srv := mocktest.NewServer(t, mockserver.Config{})
	rd, err := recording.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	// a request's session has an id of its own; the traceparent the
	// client sent is its Trace
	sessionOf := map[string]string{}
	decoded := 0 // calls with a decoded form
	n, err := srv.Load(ctx, func(ctx context.Context, fn func(*recording.Session) error) error {
		return rd.Scan(ctx, func(s *recording.Session) error {
			if s.Trace != "" {
				sessionOf[s.Trace] = s.ID
			}
			for _, c := range s.Calls {
				if c.Dst != sc.Dst {
					continue
				}
				if c.Proto != sc.Proto {
					t.Errorf("session %s: call %d %q recorded as %q, want %q", s.ID, c.Seq, clip(c.Request), c.Proto, sc.Proto)
				}
				calls[s.ID]++
				if !utf8.Valid(c.Request) && c.Decoded != capture.Decode(c.Proto, c.Request) {
					t.Errorf("session %s: call %d %q: decoded %q, want %q", s.ID, c.Seq, clip(c.Request), c.Decoded, capture.Decode(c.Proto, c.Request))
				}
				if c.Decoded != "" {
					decoded++
				}
			}
			return fn(s)
		})
	})
	rd.Close()
	// a downstream in this process (an HTTP server) records sessions of
	// its own: loaded too, not counted
	if err != nil || n < traces {
		t.Fatalf("loaded %d sessions (%v), want %d", n, err, traces)
	}
	t.Logf("%d calls to %s recorded with their decoded form", decoded, sc.Dst)
	for _, tid := range tids {
		if id := sessionOf[tid]; calls[id] < 3 {
			t.Errorf("session %s (trace %s) has %d calls to %s, want at least 3", id, tid, calls[id], sc.Dst)
		}
	}
	if t.Failed() {
		return
	}

	ln := listen(t)
	// the service's own listener and the admin API are not downstreams:
	// the test dials them from this process
	undo, err = hook.Install(hook.Config{Mode: hook.Replay, MockAddr: srv.Addr(), NoClock: true,
		Passthrough: []string{ln.Addr().String(), strings.TrimPrefix(srv.AdminURL(), "http://")}})
	if err != nil {
		t.Fatalf("installing the agent: %v", err)
	}
	got := serve(t, ln, sc, traces, func(i int) string { return "Retrace-Trace-Id: " + sessionOf[tids[i]] })
	undo()
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d: replay answered %q, recorded %q", i, got[i], want[i])
		}
	}
	resp, err := http.Get(srv.AdminURL() + "/missing")
	if err != nil {
		t.Fatal(err)
	}
	var missing []mockserver.MissingMock
	err = json.NewDecoder(resp.Body).Decode(&missing)
	resp.Body.Close()
	if err != nil || len(missing) != 0 {
		t.Errorf("missing mocks: %+v %v", missing, err)
	}
}

func listen(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// serve runs the service on ln with a fresh client, drives the requests
// and stops it.
func serve(t *testing.T, ln net.Listener, sc Scenario, traces int, hdr func(i int) string) []string {
	t.Helper()
	c := sc.NewClient(sc.Dst)
	sut := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(r.URL.Query().Get("i"))
		answers := make([]string, 3)
		errs := make([]error, 3)
		var level func(n int)
		level = func(n int) {
			answers[n], errs[n] = c.Call(r.Context(), i, n)
			if n < 2 && errs[n] == nil {
				var wg sync.WaitGroup
				wg.Go(func() { level(n + 1) })
				wg.Wait()
			}
		}
		level(0)
		if err := errors.Join(errs...); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		io.WriteString(w, strings.Join(answers, "|"))
	})}
	var wg sync.WaitGroup
	wg.Go(func() { sut.Serve(ln) })
	got := Drive(t, ln.Addr().String(), traces, hdr)
	sut.Close()
	wg.Wait()
	c.Close()
	return got
}

// Drive sends GET /work?i=N, for N below traces, with the extra header
// line hdr(N) (written past the agent's hooks, so a Retrace-Trace-Id
// reaches the service) from traces concurrent clients, and returns the
// bodies, or what went wrong, in order. It fails the test when the
// requests take more than a minute (a replay that hangs).
func Drive(t *testing.T, addr string, traces int, hdr func(i int) string) []string {
	got := make([]string, traces)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for i := range traces {
			wg.Go(func() {
				rc, err := agenttest.DialRaw(addr)
				if err != nil {
					got[i] = err.Error()
					return
				}
				defer rc.Close()
				code, body, err := rc.Get(fmt.Sprintf("/work?i=%d", i), hdr(i))
				if err != nil || code != 200 {
					got[i] = fmt.Sprintf("status %d: %s %v", code, body, err)
					return
				}
				got[i] = string(body)
			})
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%d requests not answered within a minute", traces)
	}
	return got
}

// LineClient is a Client of a text protocol: each call writes Request(i,
// n) on a pooled connection and reads one answer with Read.
type LineClient struct {
	Dst     string
	Request func(i, n int) string
	Read    func(*bufio.Reader) (string, error)

	mu   sync.Mutex
	idle []*bufConn
}

type bufConn struct {
	net.Conn
	br *bufio.Reader
}

// Call implements Client.
func (p *LineClient) Call(_ context.Context, i, n int) (string, error) {
	return p.Do(p.Request(i, n))
}

// Do sends req on a pooled connection and returns the answer.
func (p *LineClient) Do(req string) (string, error) {
	p.mu.Lock()
	var c *bufConn
	if n := len(p.idle); n > 0 {
		c, p.idle = p.idle[n-1], p.idle[:n-1]
	}
	p.mu.Unlock()
	if c == nil {
		nc, err := net.DialTimeout("tcp", p.Dst, 5*time.Second)
		if err != nil {
			return "", err
		}
		c = &bufConn{Conn: nc, br: bufio.NewReader(nc)}
	}
	c.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		c.Close()
		return "", err
	}
	ans, err := p.Read(c.br)
	if err != nil {
		c.Close()
		return "", fmt.Errorf("answer to %q: %w", req, err)
	}
	p.mu.Lock()
	p.idle = append(p.idle, c)
	p.mu.Unlock()
	return ans, nil
}

// Close implements Client.
func (p *LineClient) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.idle {
		c.Close()
	}
	p.idle = nil
}

// ReadLine reads an answer that is one line.
func ReadLine(br *bufio.Reader) (string, error) { return br.ReadString('\n') }

// Relay is a server that relays every connection to a real one: a
// downstream that a test can stop in front of a shared server.
type Relay struct {
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	cs   map[net.Conn]bool
	once sync.Once
}

// NewRelay starts a relay to target, closed at the end of the test.
func NewRelay(t testing.TB, target string) *Relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{ln: ln, cs: map[net.Conn]bool{}}
	r.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			r.mu.Lock()
			r.cs[c], r.cs[up] = true, true
			r.mu.Unlock()
			r.wg.Go(func() { io.Copy(up, c); up.Close() })
			r.wg.Go(func() { io.Copy(c, up); c.Close() })
		}
	})
	t.Cleanup(r.Close)
	return r
}

// Addr is where the relay listens.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// Close stops the relay and ends its connections; closing twice is
// harmless.
func (r *Relay) Close() {
	r.once.Do(func() {
		r.ln.Close()
		r.mu.Lock()
		for c := range r.cs {
			c.Close()
		}
		r.mu.Unlock()
	})
	r.wg.Wait()
}

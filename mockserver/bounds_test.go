package mockserver_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
)

// The tests of this file hold the mock server to its bounds: whatever a
// client that reaches it sends, its memory, connections, admin requests and
// log lines stay bounded, and healthy replays are answered as before.

const boundsDst = "10.9.0.1:80"

// priceSession is a recording with one HTTP call whose answer names id.
func priceSession(id string) *recording.Session {
	body := fmt.Sprintf(`{"price":%q}`, id)
	return &recording.Session{V: recording.SchemaVersion, ID: id, Calls: []recording.Call{{
		Seq: 0, Proto: "http", Dst: boundsDst,
		Request:  []byte("GET /price HTTP/1.1\r\nHost: prices\r\n\r\n"),
		Response: []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)),
	}}}
}

var priceRequest = []byte("GET /price HTTP/1.1\r\nHost: prices\r\n\r\n")

// framedConn is a connection to the mock server as the agent opens it, to
// boundsDst, sending HTTP requests each in a frame of its own trace.
type framedConn struct {
	c  net.Conn
	br *bufio.Reader
}

func dialFramed(t testing.TB, srv *mockserver.Server) *framedConn {
	t.Helper()
	c, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(trace.AppendFrameHeader(nil, "", boundsDst, 0)); err != nil {
		t.Fatal(err)
	}
	return &framedConn{c: c, br: bufio.NewReader(c)}
}

// get sends one request under trace tid and returns the answer's status
// and body.
func (f *framedConn) get(tid string) (int, string, error) {
	f.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := f.c.Write(trace.AppendFrame(nil, tid, boundsDst, priceRequest)); err != nil {
		return 0, "", err
	}
	return f.read()
}

func (f *framedConn) read() (int, string, error) {
	resp, err := http.ReadResponse(f.br, nil)
	if err != nil {
		return 0, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b), err
}

// admin sends one admin request and returns its status and body.
func admin(t testing.TB, srv *mockserver.Server, method, path, body, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.AdminURL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func alias(t testing.TB, srv *mockserver.Server, tid, rec string) {
	t.Helper()
	if code, body := admin(t, srv, "POST", "/traces", fmt.Sprintf(`{"trace":%q,"recording":%q}`, tid, rec), ""); code != 200 {
		t.Fatalf("POST /traces %s → %s: %d %s", tid, rec, code, body)
	}
}

// replayOnce is what the replayer does for one replay: alias, the
// service's downstream call, the report, the delete.
func replayOnce(t testing.TB, srv *mockserver.Server, fc *framedConn, rec string) error {
	tid := trace.NewID()
	alias(t, srv, tid, rec)
	code, body, err := fc.get(tid)
	if err != nil {
		return err
	}
	if want := fmt.Sprintf(`{"price":%q}`, rec); code != 200 || body != want {
		return fmt.Errorf("trace %s of %s: %d %q, want 200 %q", tid, rec, code, body, want)
	}
	code, rep := admin(t, srv, "GET", "/traces/"+tid, "", "")
	if code != 200 || !strings.Contains(rep, `"matched":0`) {
		return fmt.Errorf("report of %s: %d %s", tid, code, rep)
	}
	if code, _ := admin(t, srv, "DELETE", "/traces/"+tid, "", ""); code != 204 {
		return fmt.Errorf("DELETE /traces/%s: %d", tid, code)
	}
	return nil
}

// metricValue returns the value of an unlabelled (or fully labelled) sample of
// the server's /metrics, -1 when absent.
func metricValue(t testing.TB, srv *mockserver.Server, name string) float64 {
	t.Helper()
	_, body := admin(t, srv, "GET", "/metrics", "", "")
	for _, l := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(l, name+" "); ok {
			var v float64
			fmt.Sscan(rest, &v)
			return v
		}
	}
	return -1
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestUnknownTraceIDsCostNoState floods the mock server with 300,000
// requests, each under a trace id of its own that names no recording,
// while healthy replays run beside: the heap stays within a bound that a
// few kilobytes per id would cross 30 times over, no trace keeps state,
// the ids are counted, and every healthy replay is answered right.
func TestUnknownTraceIDsCostNoState(t *testing.T) {
	const (
		ids       = 300000
		conns     = 4
		batch     = 500
		maxGrowth = 64 << 20
	)
	sessions := []*recording.Session{priceSession("rec-a"), priceSession("rec-b")}
	srv := mocktest.NewServer(t, mockserver.Config{}, sessions...)
	before := heapInUse()

	ctx, cancel := context.WithCancel(context.Background())
	var healthy sync.WaitGroup
	var replays atomic.Int64
	for i := range 4 {
		fc := dialFramed(t, srv)
		healthy.Go(func() {
			for ctx.Err() == nil {
				if err := replayOnce(t, srv, fc, sessions[i%2].ID); err != nil {
					t.Error(err)
					return
				}
				replays.Add(1)
			}
		})
	}

	var flood sync.WaitGroup
	var sent atomic.Int64
	errc := make(chan error, conns)
	for c := range conns {
		fc := dialFramed(t, srv)
		flood.Go(func() {
			var buf []byte
			for start := c * (ids / conns); start < (c+1)*(ids/conns); start += batch {
				buf = buf[:0]
				for i := start; i < start+batch; i++ {
					buf = trace.AppendFrame(buf, fmt.Sprintf("unknown-%07d", i), boundsDst, priceRequest)
				}
				fc.c.SetDeadline(time.Now().Add(30 * time.Second))
				if _, err := fc.c.Write(buf); err != nil {
					errc <- err
					return
				}
				for range batch {
					code, _, err := fc.read()
					if err != nil || code != 502 {
						errc <- fmt.Errorf("answer to an unknown trace: %d, %v; want a 502 missing mock", code, err)
						return
					}
				}
				if n := sent.Add(batch); n%50000 == 0 {
					// Checked as it goes: state per id would otherwise
					// exhaust the machine before the end.
					if grown := int64(heapInUse()) - int64(before); grown > maxGrowth {
						errc <- fmt.Errorf("heap grew by %d MB after %d unknown trace ids", grown>>20, n)
						return
					}
				}
			}
		})
	}
	flood.Wait()
	cancel()
	healthy.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	grown := int64(heapInUse()) - int64(before)
	t.Logf("%d unknown trace ids: heap in use grew by %.1f MB; %d healthy replays beside", ids, float64(grown)/(1<<20), replays.Load())
	if grown > maxGrowth {
		t.Fatalf("heap grew by %d MB after %d unknown trace ids (bound %d MB)", grown>>20, ids, maxGrowth>>20)
	}
	if n := srv.Traces(); n != 0 {
		t.Fatalf("%d traces hold state after the flood and the replays", n)
	}
	if got := metricValue(t, srv, "retrace_mock_unknown_trace_requests_total"); got != ids {
		t.Fatalf("unknown trace requests counted: %v, want %d", got, ids)
	}
	if replays.Load() == 0 {
		t.Fatal("no healthy replay ran during the flood")
	}
}

// A request that arrives after its replay is over — a statement closed or
// a connection returned after the service answered — must not bring back
// the state the replayer deleted. The race with the DELETE is run many
// times: no state is left behind.
func TestLateRequestsLeaveNoTraceState(t *testing.T) {
	srv := mocktest.NewServer(t, mockserver.Config{}, priceSession("rec-a"))
	fc := dialFramed(t, srv)
	tid := trace.NewID()
	alias(t, srv, tid, "rec-a")
	if code, _, err := fc.get(tid); code != 200 || err != nil {
		t.Fatalf("replayed call: %d, %v", code, err)
	}
	admin(t, srv, "DELETE", "/traces/"+tid, "", "")
	if code, _, err := fc.get(tid); code != 502 || err != nil {
		t.Fatalf("late call after DELETE: %d, %v; want a 502 missing mock", code, err)
	}
	if n := srv.Traces(); n != 0 {
		t.Fatalf("a late request left %d traces with state", n)
	}

	var wg sync.WaitGroup
	for range 4 {
		late, own := dialFramed(t, srv), dialFramed(t, srv)
		wg.Go(func() {
			for range 200 {
				tid := trace.NewID()
				alias(t, srv, tid, "rec-a")
				if code, _, err := own.get(tid); code != 200 || err != nil {
					t.Errorf("replayed call: %d, %v", code, err)
					return
				}
				done := make(chan struct{})
				go func() {
					defer close(done)
					late.get(tid) // races the DELETE
				}()
				admin(t, srv, "DELETE", "/traces/"+tid, "", "")
				<-done
			}
		})
	}
	wg.Wait()
	if n := srv.Traces(); n != 0 {
		t.Fatalf("%d of 800 replays left trace state behind", n)
	}
}

func TestTraceStateExpires(t *testing.T) {
	t.Run("idle for TraceTTL", func(t *testing.T) {
		srv := mocktest.NewServer(t, mockserver.Config{TraceTTL: 400 * time.Millisecond}, priceSession("rec-a"))
		fc := dialFramed(t, srv)
		alias(t, srv, "kept", "rec-a")
		alias(t, srv, "idle", "rec-a")
		alias(t, srv, "never-used", "rec-a")
		if code, _, err := fc.get("idle"); code != 200 || err != nil {
			t.Fatalf("call of idle: %d, %v", code, err)
		}
		// "kept" is used all along, until the others have expired: it
		// stays.
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var calls atomic.Int64
		wg.Go(func() {
			kc := dialFramed(t, srv)
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				if _, _, err := kc.get("kept"); err != nil {
					t.Errorf("call of kept: %v", err)
					return
				}
				calls.Add(1)
			}
		})
		waitFor(t, "idle traces and aliases to expire", func() bool { return srv.Traces() == 1 && srv.Aliases() == 1 })
		close(stop)
		wg.Wait()
		_, rep := admin(t, srv, "GET", "/traces/kept", "", "")
		if n := strings.Count(rep, `"seq":`); n != int(calls.Load()) || n == 0 {
			t.Fatalf("the trace in use has %d of its %d calls: %s", n, calls.Load(), rep)
		}
		if got := metricValue(t, srv, `retrace_mock_traces_dropped_total{reason="ttl"}`); got != 1 {
			t.Fatalf("ttl drops counted: %v, want 1", got)
		}
		if got := metricValue(t, srv, `retrace_mock_traces_dropped_total{reason="alias_ttl"}`); got != 2 {
			t.Fatalf("alias drops counted: %v, want 2", got)
		}
	})
	t.Run("least recently used beyond MaxTraces", func(t *testing.T) {
		srv := mocktest.NewServer(t, mockserver.Config{TraceTTL: -1, MaxTraces: 32}, priceSession("rec-a"))
		fc := dialFramed(t, srv)
		for i := range 200 {
			tid := fmt.Sprintf("t-%03d", i)
			alias(t, srv, tid, "rec-a")
			if code, _, err := fc.get(tid); code != 200 || err != nil {
				t.Fatalf("call of %s: %d, %v", tid, code, err)
			}
		}
		if n := srv.Traces(); n > 32 || n < 16 {
			t.Fatalf("%d traces with state, want at most MaxTraces (32)", n)
		}
		_, rep := admin(t, srv, "GET", "/traces/t-199", "", "")
		if !strings.Contains(rep, `"matched":0`) {
			t.Fatalf("the latest trace lost its state: %s", rep)
		}
		if got := metricValue(t, srv, `retrace_mock_traces_dropped_total{reason="lru"}`); got < 168 {
			t.Fatalf("lru drops counted: %v, want at least 168", got)
		}
	})
}

func TestAliasesAreCapped(t *testing.T) {
	srv := mocktest.NewServer(t, mockserver.Config{MaxAliases: 10}, priceSession("rec-a"))
	for i := range 10 {
		alias(t, srv, fmt.Sprintf("a-%d", i), "rec-a")
	}
	code, body := admin(t, srv, "POST", "/traces", `{"trace":"a-10","recording":"rec-a"}`, "")
	if code != 503 || !strings.Contains(body, "too many aliases") {
		t.Fatalf("11th alias: %d %s; want 503 naming the bound", code, body)
	}
	alias(t, srv, "a-3", "rec-a") // re-registering one is no new alias
	admin(t, srv, "DELETE", "/traces/a-0", "", "")
	alias(t, srv, "a-10", "rec-a")
	if n := srv.Aliases(); n != 10 {
		t.Fatalf("%d aliases, want 10", n)
	}
	if got := metricValue(t, srv, "retrace_mock_aliases_refused_total"); got != 1 {
		t.Fatalf("refused aliases counted: %v, want 1", got)
	}
}

func TestConnectionsAreCapped(t *testing.T) {
	srv := mocktest.NewServer(t, mockserver.Config{MaxConns: 4, Strategies: []mockserver.Strategy{mockserver.StrategyFirst}}, priceSession("rec-a"))
	var open []*framedConn
	for range 4 {
		fc := dialFramed(t, srv)
		if code, _, err := fc.get("rec-a"); code != 200 || err != nil {
			t.Fatalf("call within the cap: %d, %v", code, err)
		}
		open = append(open, fc)
	}
	extra, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	expectClosed(t, "connection beyond MaxConns", extra)
	if got := metricValue(t, srv, "retrace_mock_connections_refused_total"); got != 1 {
		t.Fatalf("refused connections counted: %v, want 1", got)
	}
	open[0].c.Close()
	waitFor(t, "a closed connection to free its slot", func() bool { return metricValue(t, srv, "retrace_mock_open_connections") == 3 })
	fc := dialFramed(t, srv)
	if code, _, err := fc.get("rec-a"); code != 200 || err != nil {
		t.Fatalf("call after a slot was freed: %d, %v", code, err)
	}
}

// The zero Config closes idle connections (after DefaultIdleTimeout) and
// caps them; the values are documented, so a test holds them.
func TestDefaultBounds(t *testing.T) {
	if mockserver.DefaultIdleTimeout <= 0 || mockserver.DefaultMaxConns <= 0 || mockserver.DefaultTraceTTL <= 0 ||
		mockserver.DefaultMaxTraces <= 0 || mockserver.DefaultMaxAliases <= 0 {
		t.Fatal("a default bound is off")
	}
	srv := mocktest.NewServer(t, mockserver.Config{IdleTimeout: 100 * time.Millisecond, ReadTimeout: 50 * time.Millisecond})
	c := dialFramed(t, srv)
	expectClosed(t, "idle connection", c.c)
}

func TestAdminAPIBounds(t *testing.T) {
	t.Run("slow body", func(t *testing.T) {
		srv := mocktest.NewServer(t, mockserver.Config{AdminReadTimeout: 300 * time.Millisecond})
		c, err := net.Dial("tcp", strings.TrimPrefix(srv.AdminURL(), "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /traces HTTP/1.1\r\nHost: mock\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { // a byte every 50ms: never idle, never done
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
					if _, err := c.Write([]byte(" ")); err != nil {
						return
					}
				}
			}
		})
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.Copy(io.Discard, c)
		close(stop)
		wg.Wait()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("a client dripping its request body kept its admin connection for 10s")
		}
	})
	t.Run("slow headers", func(t *testing.T) {
		srv := mocktest.NewServer(t, mockserver.Config{AdminReadTimeout: 300 * time.Millisecond})
		c, err := net.Dial("tcp", strings.TrimPrefix(srv.AdminURL(), "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: mock\r\n")
		expectClosed(t, "admin connection with unfinished headers", c)
	})
	t.Run("token", func(t *testing.T) {
		if _, err := mockserver.New(mockserver.Config{Listen: "127.0.0.1:0", Admin: "0.0.0.0:0"}); !errors.Is(err, mockserver.ErrAdminToken) {
			t.Fatalf("admin on every interface without a token: %v, want ErrAdminToken", err)
		}
		const token = "s3cret-token"
		srv := mocktest.NewServer(t, mockserver.Config{Admin: "0.0.0.0:0", AdminToken: token}, priceSession("rec-a"))
		cases := []struct {
			method, path, body, token string
			code                      int
		}{
			{"GET", "/healthz", "", "", 200},
			{"GET", "/traces/x", "", "", 401},
			{"GET", "/traces/x", "", "wrong", 401},
			{"GET", "/traces/x", "", token, 200},
			{"POST", "/traces", `{"trace":"t1","recording":"rec-a"}`, "", 401},
			{"POST", "/traces", `{"trace":"t1","recording":"rec-a"}`, token, 200},
			{"GET", "/missing", "", "", 401},
			{"GET", "/metrics", "", "", 401},
			{"GET", "/metrics", "", token, 200},
			{"GET", "/debug/pprof/", "", "", 401},
			{"GET", "/debug/pprof/", "", token, 200},
			{"GET", "/debug/pprof/heap?debug=1", "", token, 200},
		}
		for _, c := range cases {
			if code, body := admin(t, srv, c.method, c.path, c.body, c.token); code != c.code {
				t.Errorf("%s %s with token %q: %d %s, want %d", c.method, c.path, c.token, code, body, c.code)
			}
		}
		if n := srv.Aliases(); n != 1 {
			t.Fatalf("%d aliases, want the one registered with the token", n)
		}
	})
	t.Run("runtime and process metrics", func(t *testing.T) {
		srv := mocktest.NewServer(t, mockserver.Config{})
		_, body := admin(t, srv, "GET", "/metrics", "", "")
		for _, name := range []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "process_resident_memory_bytes", "process_open_fds",
			"retrace_mock_traces", "retrace_mock_aliases"} {
			if !strings.Contains(body, "\n"+name+" ") {
				t.Errorf("/metrics has no %s", name)
			}
		}
	})
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRepeatedLogLinesAreLimited(t *testing.T) {
	var out syncBuffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	srv, err := mockserver.New(mockserver.Config{Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", Logger: log, LogBurst: 5, LogWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	fc := dialFramed(t, srv)
	for i := range 1000 {
		if code, _, err := fc.get(fmt.Sprintf("nobody-%d", i)); code != 502 || err != nil {
			t.Fatalf("unknown trace: %d, %v", code, err)
		}
	}
	suppressed := metricValue(t, srv, "retrace_mock_log_lines_suppressed_total")
	srv.Close()
	logs := out.String()
	if n := strings.Count(logs, `msg="missing mock"`); n != 5 {
		t.Fatalf("%d missing-mock lines for 1000 missing mocks, want LogBurst (5)", n)
	}
	if !strings.Contains(logs, `msg="repeated log line suppressed" message="missing mock" count=995`) {
		t.Fatalf("no count of the held-back lines at Close:\n%s", logs)
	}
	if suppressed != 995 {
		t.Fatalf("suppressed lines counted: %v, want 995", suppressed)
	}
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

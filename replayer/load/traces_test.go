package load

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
)

// TestTraceIDs: with Traces, every send of a request carries a trace id of
// its own derived from the request's recording id (no two alike, however
// often a recording is sent), and Retrace-Replay-Time only when asked;
// without, neither header. A request with no recording id fails, naming
// why, and sends nothing.
func TestTraceIDs(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{} // trace id → replay time
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		hits++
		if tid := r.Header.Get("Retrace-Trace-Id"); tid != "" {
			if _, dup := seen[tid]; dup {
				t.Errorf("trace id %s sent twice", tid)
			}
			seen[tid] = r.Header.Get("Retrace-Replay-Time")
		}
	}))
	defer srv.Close()
	at := time.Date(2026, 11, 29, 10, 0, 0, 5, time.UTC)
	for _, c := range []struct {
		name              string
		traces, replayAt  bool
		wantIDs, wantTime bool
	}{{"off", false, false, false, false}, {"trace ids", true, false, true, false}, {"and time", true, true, true, true}} {
		t.Run(c.name, func(t *testing.T) {
			mu.Lock()
			clear(seen)
			hits = 0
			mu.Unlock()
			exec, err := NewHTTPExecutor(srv.URL, ExecutorConfig{Traces: c.traces, ReplayTime: c.replayAt})
			if err != nil {
				t.Fatal(err)
			}
			defer exec.Close()
			var wg sync.WaitGroup
			for i := range 50 {
				wg.Go(func() {
					r := &Request{ID: "rec-" + strconv.Itoa(i%5), At: at, Method: "GET", URL: "/x", Header: http.Header{"X-A": {"1"}}}
					if o := exec.Execute(context.Background(), r); o.Err != nil {
						t.Error(o.Err)
					}
					if len(r.Header) != 1 {
						t.Errorf("the request's own header was changed: %v", r.Header)
					}
				})
			}
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			if hits != 50 {
				t.Fatalf("%d requests arrived", hits)
			}
			if !c.wantIDs {
				if len(seen) != 0 {
					t.Fatalf("trace ids sent: %v", seen)
				}
				return
			}
			if len(seen) != 50 {
				t.Fatalf("%d distinct trace ids for 50 sends", len(seen))
			}
			for tid, rt := range seen {
				rec, ok := trace.AliasOf(tid)
				if !ok || len(rec) != 5 || rec[:4] != "rec-" || !trace.ValidID(tid) {
					t.Errorf("trace id %q does not derive from its recording", tid)
				}
				if want := strconv.FormatInt(at.UnixNano(), 10); c.wantTime != (rt == want) {
					t.Errorf("replay time %q", rt)
				}
			}
			if o := exec.Execute(context.Background(), &Request{Method: "GET", URL: "/x"}); o.Err == nil {
				t.Error("a request with no recording id was sent")
			}
			if o := exec.Execute(context.Background(), &Request{ID: "access.log:12", Method: "GET", URL: "/x"}); o.Err == nil {
				t.Error("a request with a log position for an id was sent")
			}
			if hits != 50 {
				t.Errorf("requests that failed were sent")
			}
		})
	}
}

// TestMockWatch: the answers a mock gave between the two readings are the
// run's, those before not counted.
func TestMockWatch(t *testing.T) {
	sess := &recording.Session{ID: "rec", At: time.Unix(1, 0).UTC(), Inbound: recording.Inbound{Proto: "http"},
		Calls: []recording.Call{{Proto: "raw", Dst: "10.0.0.1:9", Request: []byte("ping"), Response: []byte("pong")}}}
	srv := mocktest.NewServer(t, mockserver.Config{Strategies: []mockserver.Strategy{mockserver.StrategyFirst}}, sess)
	ask := func(n int) {
		d := &mocktest.Dialer{Mock: srv.Addr(), TID: "rec", Dst: "10.0.0.1:9"}
		c, err := d.DialContext(context.Background(), "tcp", "10.0.0.1:9")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		buf := make([]byte, 4)
		for range n {
			if _, err := c.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Read(buf); err != nil || string(buf) != "pong" {
				t.Fatalf("answer %q %v", buf, err)
			}
		}
	}
	ask(7)
	ctx := context.Background()
	w, err := WatchMocks(ctx, []string{srv.AdminURL() + "/"})
	if err != nil {
		t.Fatal(err)
	}
	ask(11)
	got, err := w.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Answers != 11 || got[0].Admin != srv.AdminURL() || got[0].P99Us <= 0 {
		t.Fatalf("readings %+v", got)
	}
	merged, err := MergeMockAnswers([]MockAnswers{got[0], got[0]})
	if err != nil || merged.Answers != 11 {
		t.Fatalf("one mock read by two shards counts once: %+v %v", merged, err)
	}
	if _, err := WatchMocks(ctx, []string{"http://127.0.0.1:1"}); err == nil {
		t.Fatal("an admin URL nothing answers was accepted")
	}
}

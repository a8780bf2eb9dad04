package load

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// arrivals is a local HTTP server that timestamps every request it gets.
type arrivals struct {
	*httptest.Server
	mu    sync.Mutex
	times []time.Time
	urls  []string
	// stall, when set, is called before answering (to make the target slow).
	stall func(r *http.Request)
}

func newArrivals(t *testing.T) *arrivals {
	t.Helper()
	a := &arrivals{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		a.mu.Lock()
		a.times = append(a.times, now)
		a.urls = append(a.urls, r.URL.RequestURI())
		stall := a.stall
		a.mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		if stall != nil {
			stall(r)
		}
		if r.URL.Path == "/fail" {
			http.Error(w, "boom", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *arrivals) snapshot() ([]time.Time, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.times), slices.Clone(a.urls)
}

// input encodes requests as a timed-request file.
func input(t testing.TB, reqs []Request) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for i := range reqs {
		if err := w.Write(&reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// numbered returns n GET requests for /p?i=<k>, one every gap from base.
func numbered(n int, base time.Time, gap time.Duration) []Request {
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{At: base.Add(time.Duration(i) * gap), Method: "GET", URL: "/p?i=" + strconv.Itoa(i)}
	}
	return reqs
}

func runAgainst(t *testing.T, target string, cfg Config, in io.Reader) *Results {
	t.Helper()
	exec, err := NewExecutor(target, ExecutorConfig{Concurrency: 64, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Close()
	cfg.Executor = exec
	res, err := Run(context.Background(), cfg, NewReader(in, "test"))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestOriginalModeKeepsPerSecondCounts(t *testing.T) {
	t.Parallel()
	// A recording of 4 seconds with a burst in the second one, replayed at
	// speed 2: each recorded second becomes half a second of replay and must
	// hold exactly the requests recorded in it.
	perSecond := []int{6, 40, 3, 15}
	base := time.Date(2026, 11, 29, 10, 15, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(1, 2))
	var reqs []Request
	for sec, n := range perSecond {
		var offs []time.Duration
		for range n {
			// keep clear of the second's edges: a send is late by the
			// scheduler's wake-up latency, never early
			offs = append(offs, time.Duration(sec)*time.Second+time.Duration(50+rng.IntN(850))*time.Millisecond)
		}
		slices.Sort(offs)
		for _, o := range offs {
			reqs = append(reqs, Request{At: base.Add(o), URL: "/p"})
		}
	}
	const speed = 2
	// Timing on a shared machine: a starved process sends late however
	// good its pacing. An attempt that fails is retried (up to five in all);
	// pacing that is wrong fails every one.
	retryTiming(t, func() error {
		srv := newArrivals(t)
		res := runAgainst(t, srv.URL, Config{Mode: ModeOriginal, Speed: speed}, input(t, reqs))
		times, _ := srv.snapshot()
		if len(times) != len(reqs) || res.Sent != int64(len(reqs)) || res.Total.Errors != 0 {
			t.Fatalf("server saw %d requests, run sent %d with %d errors; want %d", len(times), res.Sent, res.Total.Errors, len(reqs))
		}
		// Offsets count from the first request, which is not at its second's
		// start.
		firstOff := reqs[0].At.Sub(base).Seconds()
		got := make([]int, len(perSecond))
		for _, at := range times {
			sec := int(at.Sub(res.Started).Seconds()*speed + firstOff)
			if sec < 0 || sec >= len(got) {
				return fmt.Errorf("arrival at %v after start is outside the recording's %d seconds (%d sends late)", at.Sub(res.Started), len(perSecond), res.Late)
			}
			got[sec]++
		}
		if !slices.Equal(got, perSecond) {
			return fmt.Errorf("arrivals per recorded second = %v, want %v (%d sends late)", got, perSecond, res.Late)
		}
		return nil
	})
}

// retryTiming runs a timing measurement up to five times and fails the
// test with every attempt's error when none passes.
func retryTiming(t *testing.T, attempt func() error) {
	t.Helper()
	var errs []string
	for i := range 5 {
		err := attempt()
		if err == nil {
			return
		}
		errs = append(errs, fmt.Sprintf("attempt %d: %v", i+1, err))
		t.Logf("attempt %d: %v", i+1, err)
	}
	t.Errorf("every attempt failed:\n%s", strings.Join(errs, "\n"))
}

func TestRateModeAchievesTheRate(t *testing.T) {
	t.Parallel()
	const rate = 400.0
	retryTiming(t, func() error {
		srv := newArrivals(t)
		res := runAgainst(t, srv.URL, Config{Mode: ModeRate, Rate: rate, Duration: 2500 * time.Millisecond},
			input(t, numbered(5000, time.Unix(0, 0), time.Millisecond)))
		if want := int64(rate * 2.5); res.Sent != want {
			return fmt.Errorf("sent %d requests in 2.5s at %v/s, want %d", res.Sent, rate, want)
		}
		times, _ := srv.snapshot()
		// Count arrivals over a 2-second window inside the run, away from
		// the start-up and the end.
		from, to := res.Started.Add(250*time.Millisecond), res.Started.Add(2250*time.Millisecond)
		n := 0
		for _, at := range times {
			if !at.Before(from) && at.Before(to) {
				n++
			}
		}
		achieved := float64(n) / 2
		if d := (achieved - rate) / rate; d > 0.01 || d < -0.01 {
			return fmt.Errorf("achieved %.1f/s over 2s, want %v/s within 1%% (%d sends late)", achieved, rate, res.Late)
		}
		return nil
	})
}

func TestRampModeRisesLinearly(t *testing.T) {
	t.Parallel()
	// 100/s → 300/s over 2s: 150 requests in the first second, 250 in the
	// second.
	retryTiming(t, func() error {
		srv := newArrivals(t)
		res := runAgainst(t, srv.URL, Config{Mode: ModeRate, Ramp: Ramp{From: 100, To: 300}, Duration: 2 * time.Second},
			input(t, numbered(1000, time.Unix(0, 0), time.Millisecond)))
		times, _ := srv.snapshot()
		var first, second int
		for _, at := range times {
			if at.Sub(res.Started) < time.Second {
				first++
			} else {
				second++
			}
		}
		if res.Sent != 400 || first < 147 || first > 153 || second < 247 || second > 253 {
			return fmt.Errorf("sent %d: %d in the first second, %d in the second; want 400: 150 and 250 (±2%%)", res.Sent, first, second)
		}
		return nil
	})
}

func TestLatencyCountsFromIntendedSendTime(t *testing.T) {
	t.Parallel()
	// Coordinated omission: the target stalls one request for 1s while the
	// run has one connection. The 100 requests due during the stall wait;
	// a generator that measured from its actual send would report them as
	// fast. Measured from their intended times, a quarter of all requests
	// take 0.25s or more and p99 is close to the stall.
	srv := newArrivals(t)
	srv.stall = func(r *http.Request) {
		if r.URL.Query().Get("i") == "20" {
			time.Sleep(time.Second)
		}
	}
	res := runAgainst(t, srv.URL, Config{Mode: ModeRate, Rate: 100, Concurrency: 1},
		input(t, numbered(200, time.Unix(0, 0), time.Millisecond)))
	if res.Total.Count != 200 {
		t.Fatalf("count = %d, want 200", res.Total.Count)
	}
	if res.Total.P99Ms < 900 {
		t.Errorf("p99 = %.1fms after a 1s stall on a single connection, want >= 900ms", res.Total.P99Ms)
	}
	if res.Total.P90Ms < 200 {
		t.Errorf("p90 = %.1fms, want >= 200ms (the queue behind the stall)", res.Total.P90Ms)
	}
	if res.Late < 50 {
		t.Errorf("late = %d, want the ~100 requests due during the stall", res.Late)
	}
}

func TestShardsAreDisjointAndCoverTheInput(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 16} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			counts := make([]int, n)
			for i := int64(0); i < 10000; i++ {
				owners := 0
				for s := 0; s < n; s++ {
					if (Shard{Index: s, Count: n}).Owns(i) {
						owners++
						counts[s]++
					}
				}
				if owners != 1 {
					t.Fatalf("index %d has %d owners among %d shards", i, owners, n)
				}
			}
			for s, c := range counts {
				if c < 10000/n*8/10 {
					t.Errorf("shard %d/%d owns %d of 10000: uneven", s, n, c)
				}
			}
		})
	}
}

func TestShardRunsSendTheInputOnce(t *testing.T) {
	srv := newArrivals(t)
	reqs := numbered(300, time.Unix(0, 0), time.Millisecond)
	const n = 3
	var sum int64
	for s := 0; s < n; s++ {
		res := runAgainst(t, srv.URL, Config{Mode: ModeMax, Concurrency: 4, Shard: Shard{Index: s, Count: n}}, input(t, reqs))
		if res.Lines != 300 || res.Owned != res.Sent {
			t.Errorf("shard %d: lines %d owned %d sent %d", s, res.Lines, res.Owned, res.Sent)
		}
		if res.Owned > 150 || res.Owned < 50 {
			t.Errorf("shard %d owns %d of 300: uneven", s, res.Owned)
		}
		sum += res.Sent
	}
	_, urls := srv.snapshot()
	seen := map[string]int{}
	for _, u := range urls {
		seen[u]++
	}
	for i := range reqs {
		if c := seen[reqs[i].URL]; c != 1 {
			t.Errorf("%s sent %d times by %d shards, want once", reqs[i].URL, c, n)
		}
	}
	if sum != 300 || len(urls) != 300 {
		t.Errorf("shards sent %d, server saw %d; want 300", sum, len(urls))
	}
}

func TestShardOffsetsDiffer(t *testing.T) {
	seen := map[time.Duration]bool{}
	for i := 0; i < 4; i++ {
		seen[Shard{Index: i, Count: 4}.Offset(100*time.Millisecond)] = true
	}
	if len(seen) != 4 {
		t.Errorf("4 shards have %d distinct offsets", len(seen))
	}
}

func TestErrorsFileIsALoadInput(t *testing.T) {
	srv := newArrivals(t)
	reqs := []Request{
		{At: time.Unix(1, 0), URL: "/p?i=0"},
		{At: time.Unix(2, 0), Method: "POST", URL: "/fail", Header: map[string][]string{"X-A": {"b"}}, Body: []byte(`{"n":1}`)},
		{At: time.Unix(3, 0), URL: "/p?i=2"},
		{At: time.Unix(4, 0), Method: "PUT", URL: "/fail?x=1", Body: []byte{0xff, 0, 1}},
	}
	var errs, ts bytes.Buffer
	res := runAgainst(t, srv.URL, Config{Mode: ModeMax, Errors: &errs, Timeseries: &ts}, input(t, reqs))
	if res.Total.Errors != 2 || res.Total.Status["503"] != 2 || res.Total.Status["200"] != 2 {
		t.Fatalf("errors %d status %v, want 2 errors of 503 and 2 of 200", res.Total.Errors, res.Total.Status)
	}
	if !bytes.Contains(errs.Bytes(), []byte(`"error":"HTTP status 503"`)) {
		t.Errorf("errors.jsonl lacks the error: %s", errs.String())
	}
	rd := NewReader(&errs, ErrorsFile)
	var got []Request
	for {
		var r Request
		err := rd.Next(&r)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	slices.SortFunc(got, func(a, b Request) int { return a.At.Compare(b.At) })
	if len(got) != 2 || got[0].URL != "/fail" || string(got[0].Body) != `{"n":1}` || got[0].Header.Get("X-A") != "b" ||
		got[1].Method != "PUT" || !bytes.Equal(got[1].Body, []byte{0xff, 0, 1}) {
		t.Errorf("errors.jsonl read back as %+v", got)
	}
	if ts.Len() == 0 {
		t.Error("no time series written")
	}
}

func TestBadLinesAreCountedNotFatal(t *testing.T) {
	srv := newArrivals(t)
	in := "{\"at\":\"2026-11-29T10:00:00Z\",\"url\":\"/a\"}\nnot json\n\n{\"v\":9,\"url\":\"/b\"}\n{\"at\":\"2026-11-29T10:00:01Z\",\"url\":\"/c\"}\n"
	var bad []string
	exec, err := NewHTTPExecutor(srv.URL, ExecutorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Close()
	res, err := Run(context.Background(), Config{Mode: ModeMax, Executor: exec,
		OnBadLine: func(e *LineError) { bad = append(bad, fmt.Sprint(e.Line)) }}, NewReader(bytes.NewBufferString(in), "in.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 2 || res.BadLines != 2 || !slices.Equal(bad, []string{"2", "4"}) {
		t.Errorf("sent %d, bad %d at lines %v; want 2 sent, bad lines 2 and 4", res.Sent, res.BadLines, bad)
	}
}

func TestStopsWhenCancelled(t *testing.T) {
	srv := newArrivals(t)
	exec, err := NewHTTPExecutor(srv.URL, ExecutorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res, err := Run(ctx, Config{Mode: ModeRate, Rate: 50, Executor: exec}, NewReader(input(t, numbered(1000, time.Unix(0, 0), 0)), "in"))
	if err == nil || res == nil || res.Sent == 0 || res.Sent > 30 {
		t.Errorf("cancelled run: err %v, results %+v", err, res)
	}
}

func TestStartAtInThePastIsRefused(t *testing.T) {
	_, err := Run(context.Background(), Config{Executor: nopExecutor{}, StartAt: time.Now().Add(-time.Minute)},
		NewReader(bytes.NewBufferString(""), "in"))
	if err == nil || !strings.Contains(err.Error(), "passed") {
		t.Errorf("error %v", err)
	}
}

func TestStartAtWaits(t *testing.T) {
	at := time.Now().Add(300 * time.Millisecond)
	res, err := Run(context.Background(), Config{Mode: ModeMax, Executor: nopExecutor{}, StartAt: at},
		NewReader(input(t, numbered(3, time.Unix(0, 0), 0)), "in"))
	if err != nil || res.Sent != 3 || time.Now().Before(at) || !res.Started.Equal(at) {
		t.Errorf("sent %d, started %v (want %v), err %v", res.Sent, res.Started, at, err)
	}
}

// In rate mode a duration longer than the input sends the input again, in
// order, until the duration ends; Once stops at the end of the input. The
// shards of a repeated run still send every request of every pass once.
func TestRateModeRepeatsTheInputForTheDuration(t *testing.T) {
	reqs := numbered(30, time.Unix(0, 0), time.Millisecond)
	count := func(urls []string) map[string]int {
		seen := map[string]int{}
		for _, u := range urls {
			seen[u]++
		}
		return seen
	}
	for _, c := range []struct {
		name   string
		cfg    Config
		rewind bool
		passes int
	}{
		{"kept in memory", Config{Mode: ModeRate, Rate: 200, Duration: 600 * time.Millisecond}, false, 4},
		{"input opened again", Config{Mode: ModeRate, Rate: 200, Duration: 600 * time.Millisecond}, true, 4},
		{"once", Config{Mode: ModeRate, Rate: 200, Duration: 600 * time.Millisecond, Once: true}, false, 1},
		{"ramp", Config{Mode: ModeRate, Ramp: Ramp{From: 150, To: 250}, Duration: 600 * time.Millisecond}, false, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := newArrivals(t)
			var sent int64
			for s := range 2 {
				cfg := c.cfg
				cfg.Shard = Shard{Index: s, Count: 2}
				if c.rewind {
					cfg.Rewind = func() (*Reader, error) { return NewReader(input(t, reqs), "again"), nil }
				}
				res := runAgainst(t, srv.URL, cfg, input(t, reqs))
				if res.Lines != 30 || res.Incomplete != "" {
					t.Fatalf("shard %d: %d lines, incomplete %q", s, res.Lines, res.Incomplete)
				}
				sent += res.Sent
			}
			// 200/s (or 150→250/s) for 0.6s is 120 requests: 4 passes of 30.
			_, urls := srv.snapshot()
			if want := int64(30 * c.passes); sent != want || len(urls) != int(want) {
				t.Fatalf("sent %d, server saw %d; want %d", sent, len(urls), want)
			}
			for u, n := range count(urls) {
				if n != c.passes {
					t.Errorf("%s sent %d times, want %d", u, n, c.passes)
				}
			}
		})
	}
}

func TestInterruptedRunIsMarkedIncomplete(t *testing.T) {
	srv := newArrivals(t)
	exec, err := NewHTTPExecutor(srv.URL, ExecutorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res, err := Run(ctx, Config{Mode: ModeRate, Rate: 50, Duration: time.Minute, Executor: exec}, NewReader(input(t, numbered(10, time.Unix(0, 0), 0)), "in"))
	if err == nil || res == nil || res.Incomplete != "interrupted" {
		t.Fatalf("interrupted run: err %v, incomplete %q", err, res.Incomplete)
	}
}

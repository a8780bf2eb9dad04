package regress_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/replayer/diff"
	"github.com/retrace-dev/retrace/replayer/regress"
	"github.com/retrace-dev/retrace/replayer/replaytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// record runs the shop v1 against the real price service and records one
// session per order, plus one GET /health.
func record(t testing.TB) []*recording.Session {
	t.Helper()
	prices := replaytest.NewPrices(t)
	rec := replaytest.NewRecorder(replaytest.Direct(replaytest.Addr(prices.URL)))
	shop := replaytest.NewShop(t, replaytest.ShopV1, rec.Downstream(replaytest.PricesDst))
	i := 0
	for _, sku := range []string{"a", "b", "c", "d"} {
		for _, qty := range []int{1, 3} {
			rec.Send(t, replaytest.Addr(shop.URL), fmt.Sprintf("s%02d-%s", i, sku), replaytest.OrderRequest(sku, qty))
			i++
		}
	}
	rec.Send(t, replaytest.Addr(shop.URL), "s99-health", replaytest.HTTPRequest("GET", "/health", "shop.internal", ""))
	return rec.Sessions()
}

type collected struct {
	mu      sync.Mutex
	results []*regress.Result
}

func (c *collected) add(r *regress.Result) {
	c.mu.Lock()
	c.results = append(c.results, r)
	c.mu.Unlock()
}

func (c *collected) byStatus(st regress.Status) []string {
	var ids []string
	for _, r := range c.results {
		if r.Status == st {
			ids = append(ids, r.Name())
		}
	}
	sort.Strings(ids)
	return ids
}

func sorted(s []string) []string { sort.Strings(s); return s }

func (c *collected) findings(id string) []string {
	for _, r := range c.results {
		if r.Session == id {
			var out []string
			for _, f := range r.Findings {
				out = append(out, f.Where+" "+f.Path)
			}
			return out
		}
	}
	return nil
}

func run(t *testing.T, cfg regress.Config) *collected {
	t.Helper()
	c := &collected{}
	if err := regress.Run(context.Background(), cfg, c.add); err != nil {
		t.Fatal(err)
	}
	return c
}

func noiseRules(t *testing.T, cfg regress.Config) *diff.Rules {
	t.Helper()
	n, err := regress.DetectNoise(context.Background(), cfg, regress.NoiseConfig{PerAPI: 2})
	if err != nil {
		t.Fatal(err)
	}
	r, err := diff.NewRules(n.Rules...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSameBuildPassesOnceNoiseIsDetected(t *testing.T) {
	sessions := record(t)
	mock := replaytest.NewMock(t, sessions...)
	shop := replaytest.NewShop(t, replaytest.ShopV1, replaytest.InMock(mock, replaytest.PricesDst))
	cfg := regress.Config{Source: regress.Sessions(sessions), Target: shop.URL, MockAdmin: mock.URL, Concurrency: 4}

	// Without noise rules the timestamp fails every session.
	c := run(t, cfg)
	if got := c.byStatus(regress.Failed); len(got) != len(sessions) {
		t.Fatalf("without noise rules %d of %d failed: %v", len(got), len(sessions), got)
	}
	if f := c.findings("s00-a"); fmt.Sprint(f) != "[response body.ts downstream header.X-Request-Id]" {
		t.Errorf("findings of s00-a: %v, want only the timestamp and the request id", f)
	}

	n, err := regress.DetectNoise(context.Background(), cfg, regress.NoiseConfig{PerAPI: 2})
	if err != nil {
		t.Fatal(err)
	}
	var ignored []string
	for _, r := range n.Rules {
		ignored = append(ignored, r.API+" "+r.Scope+" "+r.Dst+" "+r.Ignore)
	}
	want := []string{"GET /health response  body.ts", "POST /orders response  body.ts",
		"POST /orders downstream " + replaytest.PricesDst + " header.X-Request-Id"}
	if fmt.Sprint(ignored) != fmt.Sprint(want) {
		t.Errorf("noise rules %v, want %v", ignored, want)
	}
	if n.Sessions != 3 || n.Errors != 0 {
		t.Errorf("noise detection replayed %d sessions with %d errors, want 3 and 0", n.Sessions, n.Errors)
	}
	cfg.Rules, _ = diff.NewRules(n.Rules...)
	c = run(t, cfg)
	if got := c.byStatus(regress.Passed); len(got) != len(sessions) {
		t.Errorf("with noise rules only %v passed; failed %v errors %v", got, c.byStatus(regress.Failed), c.byStatus(regress.Errored))
	}
	if mock.Traces() != 0 {
		t.Errorf("the mock still holds %d traces: the runner did not forget them", mock.Traces())
	}
}

func TestChangedBuildFlagsExactlyTheChange(t *testing.T) {
	sessions := record(t)
	mock := replaytest.NewMock(t, sessions...)
	v1 := replaytest.NewShop(t, replaytest.ShopV1, replaytest.InMock(mock, replaytest.PricesDst))
	v2 := replaytest.NewShop(t, replaytest.ShopV2, replaytest.InMock(mock, replaytest.PricesDst))
	cfg := regress.Config{Source: regress.Sessions(sessions), Target: v1.URL, MockAdmin: mock.URL, Concurrency: 8}
	cfg.Rules = noiseRules(t, cfg)
	cfg.Target = v2.URL
	c := run(t, cfg)
	want := []string{"s02-b", "s03-b", "s04-c", "s05-c"}
	if got := c.byStatus(regress.Failed); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("failed %v, want %v", got, want)
	}
	if f := c.findings("s02-b"); fmt.Sprint(f) != "[response body.order.total]" {
		t.Errorf("s02-b findings %v", f)
	}
	if f := c.findings("s04-c"); fmt.Sprint(f) != "[downstream target]" {
		t.Errorf("s04-c findings %v", f)
	}
	for _, r := range c.results {
		if r.Session == "s04-c" {
			d := r.Findings[0]
			if d.Want != "/price?sku=c" || d.Got != "/price?sku=c&currency=EUR" || d.Call == nil || d.Call.Dst != replaytest.PricesDst {
				t.Errorf("downstream finding %+v call %+v", d, d.Call)
			}
			if r.Detail == nil || len(r.Detail.Calls) != 1 || r.Detail.Replayed == nil || r.Detail.Recorded == nil {
				t.Errorf("failing session has no usable detail: %+v", r.Detail)
			}
		}
	}
}

func TestABClassifiesPreexistingAndRegressions(t *testing.T) {
	sessions := record(t)
	mock := replaytest.NewMock(t, sessions...)
	v1 := replaytest.NewShop(t, replaytest.ShopV1, replaytest.InMock(mock, replaytest.PricesDst))
	v2 := replaytest.NewShop(t, replaytest.ShopV2, replaytest.InMock(mock, replaytest.PricesDst))
	base := regress.Config{Source: regress.Sessions(sessions), Target: v1.URL, MockAdmin: mock.URL, Concurrency: 4}
	rules := noiseRules(t, base)

	t.Run("change already in baseline", func(t *testing.T) {
		cfg := regress.Config{Source: regress.Sessions(sessions), Target: v2.URL, Baseline: v2.URL, MockAdmin: mock.URL, Rules: rules}
		c := run(t, cfg)
		if got := c.byStatus(regress.Passed); len(got) != len(sessions) {
			t.Fatalf("passed %v; failed %v", got, c.byStatus(regress.Failed))
		}
		pre := map[string]int{}
		for _, r := range c.results {
			pre[r.Session] = len(r.Preexisting)
		}
		if pre["s02-b"] != 1 || pre["s04-c"] != 1 || pre["s00-a"] != 0 {
			t.Errorf("pre-existing differences per session: %v", pre)
		}
	})
	t.Run("change only in candidate", func(t *testing.T) {
		cfg := regress.Config{Source: regress.Sessions(sessions), Target: v2.URL, Baseline: v1.URL, MockAdmin: mock.URL, Rules: rules}
		c := run(t, cfg)
		want := []string{"s02-b", "s03-b", "s04-c", "s05-c"}
		if got := c.byStatus(regress.Failed); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("failed %v, want %v", got, want)
		}
		for _, r := range c.results {
			if len(r.Preexisting) != 0 {
				t.Errorf("%s: pre-existing %v", r.Session, r.Preexisting)
			}
		}
	})
	t.Run("each build with its own mock server", func(t *testing.T) {
		baseMock := replaytest.NewMock(t, sessions...)
		base := replaytest.NewShop(t, replaytest.ShopV1, replaytest.InMock(baseMock, replaytest.PricesDst))
		cfg := regress.Config{Source: regress.Sessions(sessions), Target: v2.URL, MockAdmin: mock.URL,
			Baseline: base.URL, BaselineMockAdmin: baseMock.URL, Rules: rules}
		c := run(t, cfg)
		want := []string{"s02-b", "s03-b", "s04-c", "s05-c"}
		if got := c.byStatus(regress.Failed); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("failed %v, want %v", got, want)
		}
		if baseMock.Traces() != 0 || mock.Traces() != 0 {
			t.Errorf("traces left: candidate mock %d, baseline mock %d", mock.Traces(), baseMock.Traces())
		}
	})
	t.Run("candidate differs from baseline and recording differently", func(t *testing.T) {
		// The baseline has the V2 change; the candidate is V1 for b's
		// total but both differ from the recording at nothing else:
		// a V1 candidate against a V2 baseline passes, the baseline's
		// differences are not the candidate's.
		cfg := regress.Config{Source: regress.Sessions(sessions), Target: v1.URL, Baseline: v2.URL, MockAdmin: mock.URL, Rules: rules}
		c := run(t, cfg)
		if got := c.byStatus(regress.Passed); len(got) != len(sessions) {
			t.Fatalf("passed %v; failed %v", got, c.byStatus(regress.Failed))
		}
	})
}

func TestRepeatUsesOwnTraces(t *testing.T) {
	sessions := record(t)
	mock := replaytest.NewMock(t, sessions...)
	shop := replaytest.NewShop(t, replaytest.ShopV1, replaytest.InMock(mock, replaytest.PricesDst))
	rules, _ := diff.NewRules(diff.Rule{Ignore: "body.ts"}, diff.Rule{IgnoreHeader: "X-Request-Id"})
	c := run(t, regress.Config{Source: regress.Sessions(sessions[:3]), Target: shop.URL, MockAdmin: mock.URL,
		Repeat: 4, Concurrency: 12, Rules: rules})
	if len(c.results) != 12 {
		t.Fatalf("%d results, want 12", len(c.results))
	}
	traces := map[string]bool{}
	for _, r := range c.results {
		if r.Status != regress.Passed {
			t.Errorf("%s: %s %s %v", r.Name(), r.Status, r.Error, r.Findings)
		}
		traces[r.Trace] = true
	}
	if len(traces) != 12 {
		t.Errorf("%d distinct trace ids for 12 replays", len(traces))
	}
}

func TestErrorsAreResultsAndDoNotStopTheRun(t *testing.T) {
	sessions := record(t)
	// A port nobody listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	// A target that is down before the run starts is the run's error,
	// named (guard_test.go); one that fails during the run makes each
	// session an error and the run goes on.
	err = regress.Run(context.Background(), regress.Config{Source: regress.Sessions(sessions), Target: dead}, func(*regress.Result) {})
	if !errors.Is(err, regress.ErrUnreachable) || !strings.Contains(err.Error(), "connect") {
		t.Fatalf("Run against a dead target: %v", err)
	}

	// A server that resets every connection, and one that never answers.
	for name, handle := range map[string]func(net.Conn){
		"reset":   func(c net.Conn) { c.(*net.TCPConn).SetLinger(0); c.Close() },
		"timeout": func(c net.Conn) { time.Sleep(1500 * time.Millisecond); c.Close() },
	} {
		t.Run(name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			defer wg.Wait()
			defer l.Close()
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					wg.Add(1)
					go func() { defer wg.Done(); handle(c) }()
				}
			}()
			c := run(t, regress.Config{Source: regress.Sessions(sessions[:3]), Target: "http://" + l.Addr().String(),
				Concurrency: 2, Timeout: 300 * time.Millisecond})
			if got := c.byStatus(regress.Errored); len(got) != 3 {
				t.Fatalf("errors %v", got)
			}
			for _, r := range c.results {
				if r.Session == "" || r.Error == "" {
					t.Errorf("error result without session or message: %+v", r)
				}
			}
		})
	}
}

func TestSelection(t *testing.T) {
	sessions := record(t)
	base := sessions[0].At
	for i, s := range sessions {
		s.At = base.Add(time.Duration(i) * time.Minute)
	}
	count := func(sel regress.Selection) int {
		n, err := regress.Count(context.Background(), regress.Config{Source: regress.Sessions(sessions), Select: sel})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	cases := []struct {
		name string
		sel  regress.Selection
		want int
	}{
		{"all", regress.Selection{}, 9},
		{"api raw", regress.Selection{APIs: []string{"POST /orders*"}}, 8},
		{"api name", regress.Selection{APIs: []string{"GET /health"}}, 1},
		{"two apis", regress.Selection{APIs: []string{"GET *", "POST /nothing"}}, 1},
		{"since", regress.Selection{Since: base.Add(5 * time.Minute)}, 4},
		{"until", regress.Selection{Until: base.Add(2 * time.Minute)}, 2},
		{"ids", regress.Selection{IDs: map[string]bool{"s00-a": true, "s99-health": true, "nope": true}}, 2},
		{"limit", regress.Selection{Limit: 3}, 3},
		{"sample none", regress.Selection{Sample: 0.0000001}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := count(tc.sel); got != tc.want {
				t.Errorf("selected %d, want %d", got, tc.want)
			}
		})
	}
	// A sample is deterministic in the seed and independent of order.
	shop := replaytest.NewShop(t, replaytest.ShopV1, replaytest.Direct(replaytest.Addr(replaytest.NewPrices(t).URL)))
	pick := func(seed int64, ss []*recording.Session) string {
		var ids []string
		regress.Run(context.Background(), regress.Config{Source: regress.SourceFunc(func(ctx context.Context, fn func(*recording.Session) error) error {
			for _, s := range ss {
				fn(s)
			}
			return nil
		}), Select: regress.Selection{Sample: 0.5, Seed: seed}, Target: shop.URL, Timeout: time.Second}, func(r *regress.Result) {
			ids = append(ids, r.Session)
		})
		sort.Strings(ids)
		return strings.Join(ids, ",")
	}
	rev := append([]*recording.Session(nil), sessions...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	a, b := pick(1, sessions), pick(1, rev)
	if a != b || a == "" {
		t.Errorf("seed 1 picked %q and, reversed, %q", a, b)
	}
	if c := pick(2, sessions); c == a {
		t.Logf("seeds 1 and 2 picked the same sessions %q (possible, unlikely)", c)
	}
}

func TestAPIName(t *testing.T) {
	for in, want := range map[string]string{
		"GET /orders/17":     "GET /orders/{id}",
		"GET /v1/orders":     "GET /v1/orders",
		"GET /u/ord-12345/x": "GET /u/{id}/x",
		"GET /o/3f2c8a4e-1b2d-4c5e-9f00-1234567890ab": "GET /o/{id}",
		"DELETE /": "DELETE /",
	} {
		m, p, _ := strings.Cut(in, " ")
		if got := regress.APIName(m, p); got != want {
			t.Errorf("APIName(%q) = %q, want %q", in, got, want)
		}
	}
	if m, p := regress.RequestLine([]byte("GET http://h:1/a/b?x=1 HTTP/1.1\r\n")); m != "GET" || p != "/a/b" {
		t.Errorf("RequestLine absolute form: %q %q", m, p)
	}
}

func TestConfigErrors(t *testing.T) {
	for name, cfg := range map[string]regress.Config{
		"no source":    {Target: "http://127.0.0.1:1"},
		"no target":    {Source: regress.Sessions(nil)},
		"bad scheme":   {Source: regress.Sessions(nil), Target: "ftp://x"},
		"bad admin":    {Source: regress.Sessions(nil), Target: "http://127.0.0.1:1", MockAdmin: "127.0.0.1:2"},
		"bad baseline": {Source: regress.Sessions(nil), Target: "http://127.0.0.1:1", Baseline: "nope"},
	} {
		err := regress.Run(context.Background(), cfg, func(*regress.Result) {})
		if err == nil || !strings.Contains(err.Error(), "bad replay configuration") {
			t.Errorf("%s: error %v", name, err)
		}
	}
}

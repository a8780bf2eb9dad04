package analyze

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
	"go.uber.org/goleak"

	"github.com/retrace-dev/retrace/replayer/load"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// latencies is a deterministic heavy-tailed sample: mostly ~2ms, a tail up
// to seconds, over three APIs.
func latencies(n int) (durs []time.Duration, apis []string) {
	rng := rand.New(rand.NewPCG(7, 8))
	names := []string{"GET /a", "POST /b", "GET /c/{id}"}
	for range n {
		d := time.Duration(rng.ExpFloat64()*2e6) + 100*time.Microsecond
		if rng.IntN(100) == 0 {
			d += time.Duration(rng.IntN(5000)) * time.Millisecond
		}
		durs = append(durs, d)
		apis = append(apis, names[rng.IntN(len(names))])
	}
	return durs, apis
}

// writeShard writes the results of the latencies with indexes owned by sh,
// as load does, into dir/<shard name>/.
func writeShard(t *testing.T, dir string, sh load.Shard, durs []time.Duration, apis []string, start time.Time) {
	t.Helper()
	total := load.NewHistogram()
	per := map[string]*struct {
		h      *hdr.Histogram
		count  int64
		errors int64
	}{}
	var errors int64
	for i, d := range durs {
		if !sh.Owns(int64(i)) {
			continue
		}
		us := int64(d / time.Microsecond)
		total.RecordValue(us)
		p := per[apis[i]]
		if p == nil {
			p = &struct {
				h      *hdr.Histogram
				count  int64
				errors int64
			}{h: load.NewHistogram()}
			per[apis[i]] = p
		}
		p.h.RecordValue(us)
		p.count++
		if i%50 == 0 {
			p.errors++
			errors++
		}
	}
	res := &load.Results{V: load.ResultsVersion, Shard: sh.String(), Mode: load.ModeRate, Started: start,
		Ended: start.Add(10 * time.Second), Sent: total.TotalCount(),
		Total: load.Stats{API: "total", Count: total.TotalCount(), Errors: errors}}
	if err := load.FillStats(&res.Total, total, true); err != nil {
		t.Fatal(err)
	}
	for name, p := range per {
		s := load.Stats{API: name, Count: p.count, Errors: p.errors}
		if err := load.FillStats(&s, p.h, true); err != nil {
			t.Fatal(err)
		}
		res.APIs = append(res.APIs, s)
	}
	p := filepath.Join(dir, sh.Name(), load.ResultsFile)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := load.WriteResults(f, res); err != nil {
		t.Fatal(err)
	}
}

func TestMergedShardsEqualASingleRun(t *testing.T) {
	durs, apis := latencies(20000)
	start := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	single, sharded := t.TempDir(), t.TempDir()
	writeShard(t, single, load.Shard{}, durs, apis, start)
	for i := range 4 {
		writeShard(t, sharded, load.Shard{Index: i, Count: 4}, durs, apis, start)
	}
	ctx := context.Background()
	a, err := Load(ctx, single)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load(ctx, sharded)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Shards) != 4 || len(b.Missing) != 0 {
		t.Fatalf("merged %v, missing %v", b.Shards, b.Missing)
	}
	for q := 0.0; q <= 100; q += 0.1 {
		if x, y := a.Total.Hist.ValueAtQuantile(q), b.Total.Hist.ValueAtQuantile(q); x != y {
			t.Fatalf("p%.1f: single run %dµs, merged shards %dµs", q, x, y)
		}
	}
	sa, sb := Summarize(a), Summarize(b)
	sa.Run, sb.Run, sa.Shards, sb.Shards = "", "", 0, 0
	ja, _ := json.Marshal(sa)
	jb, _ := json.Marshal(sb)
	if !bytes.Equal(ja, jb) {
		t.Errorf("summaries differ:\nsingle %s\nshards %s", ja, jb)
	}
	if sa.Total.Count != 20000 || len(sa.APIs) != 3 || sa.Total.Errors != 400 {
		t.Errorf("total %+v with %d APIs", sa.Total, len(sa.APIs))
	}
}

func TestDuplicateAndMissingShards(t *testing.T) {
	durs, apis := latencies(100)
	start := time.Unix(1700000000, 0)
	dir := t.TempDir()
	writeShard(t, dir, load.Shard{Index: 0, Count: 3}, durs, apis, start)
	writeShard(t, dir, load.Shard{Index: 2, Count: 3}, durs, apis, start)
	run, err := Load(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Missing) != 1 || run.Missing[0] != "1/3" {
		t.Errorf("missing %v, want [1/3]", run.Missing)
	}
	if _, err := Load(context.Background(), dir, filepath.Join(dir, "shard-0-of-3")); err == nil || !strings.Contains(err.Error(), "appears twice") {
		t.Errorf("loading a shard twice: %v", err)
	}
	if _, err := Load(context.Background(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "no results.json") {
		t.Errorf("empty dir: %v", err)
	}
}

func loadRun(t *testing.T, scale float64, errEvery int) *Run {
	t.Helper()
	durs, apis := latencies(5000)
	for i := range durs {
		durs[i] = time.Duration(float64(durs[i]) * scale)
	}
	dir := t.TempDir()
	writeShard(t, dir, load.Shard{}, durs, apis, time.Unix(1700000000, 0))
	run, err := Load(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

func TestCompareAndThresholds(t *testing.T) {
	base, slower := loadRun(t, 1, 0), loadRun(t, 1.25, 0)
	th := NoThresholds()
	th.MaxP99Increase = 0.10
	r := NewReport(base, slower, th)
	if d := r.Comparison.Total.P99Change; d < 0.2 || d > 0.3 {
		t.Errorf("p99 change %.3f, want ≈ +25%%", d)
	}
	if len(r.Violations) != 4 { // total and each of 3 APIs
		t.Errorf("violations %v, want the total and 3 APIs", r.Violations)
	}
	if r := NewReport(base, base, th); len(r.Violations) != 0 {
		t.Errorf("a run against itself crossed %v", r.Violations)
	}
	th = NoThresholds()
	th.MaxErrorRate = 0.01 // the runs have 2% errors
	if r := NewReport(base, nil, th); len(r.Violations) == 0 || r.Violations[0].Metric != "error_rate" || r.Violations[0].API != "total" {
		t.Errorf("violations %v, want the error rate of total first", r.Violations)
	}
	th.MaxErrorRate = 0.05
	th.MaxP99 = time.Hour
	if r := NewReport(base, nil, th); len(r.Violations) != 0 {
		t.Errorf("violations %v under loose limits", r.Violations)
	}
}

func TestJSONContract(t *testing.T) {
	run := loadRun(t, 1, 0)
	var buf bytes.Buffer
	if err := NewReport(run, nil, NoThresholds()).WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Total map[string]any   `json:"total"`
		APIs  []map[string]any `json:"apis"`
	}
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	for _, e := range append([]map[string]any{out.Total}, out.APIs...) {
		for _, k := range []string{"count", "errors", "rate", "p50_ms", "p90_ms", "p99_ms", "max_ms"} {
			if _, ok := e[k].(float64); !ok {
				t.Errorf("entry %v lacks numeric %q", e["api"], k)
			}
		}
	}
	if len(out.APIs) != 3 || out.APIs[0]["api"] == "" || out.Total["count"].(float64) != 5000 {
		t.Errorf("json %s", buf.String())
	}
	if out.Total["rate"].(float64) != 500 { // 5000 in 10s
		t.Errorf("rate %v, want 500", out.Total["rate"])
	}
}

func TestHTMLIsSelfContained(t *testing.T) {
	base, cand := loadRun(t, 1, 0), loadRun(t, 1.3, 0)
	for name, r := range map[string]*Report{"single": NewReport(base, nil, NoThresholds()), "compare": NewReport(base, cand, NoThresholds())} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := r.WriteHTML(&buf); err != nil {
				t.Fatal(err)
			}
			page := buf.String()
			if n := strings.Count(page, "<svg"); n != 3 {
				t.Errorf("%d SVG plots, want 3", n)
			}
			if strings.Contains(page, "<script") || strings.Contains(page, "<link") {
				t.Error("page loads scripts or styles")
			}
			for _, u := range regexp.MustCompile(`(?:src|href)=|url\(|https?://[^"]*`).FindAllString(page, -1) {
				if u != "http://www.w3.org/2000/svg" {
					t.Errorf("page refers to %q", u)
				}
			}
			if !strings.Contains(page, "GET /c/{id}") {
				t.Error("per-API table lacks an API")
			}
			if name == "compare" && !strings.Contains(page, `class="worse"`) {
				t.Error("compare page shows no worse delta for a 30% slower candidate")
			}
			if dir := os.Getenv("RETRACE_TEST_ARTIFACTS"); dir != "" {
				_ = os.WriteFile(filepath.Join(dir, "load-report-"+name+".html"), buf.Bytes(), 0o644)
			}
		})
	}
}

func TestParsePercent(t *testing.T) {
	for in, want := range map[string]float64{"10%": 0.1, "0.5": 0.5, "1.5%": 0.015} {
		if got, err := ParsePercent(in); err != nil || got != want {
			t.Errorf("ParsePercent(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "x%", "-1%"} {
		if _, err := ParsePercent(in); err == nil {
			t.Errorf("ParsePercent(%q) accepted", in)
		}
	}
}

// A gate never passes on nothing: a candidate without requests, one that
// lost an API of the baseline, one that sent far fewer requests, and runs
// cut short fail it whatever the thresholds.
func TestGateFailsOnEmptyOrPartialCandidates(t *testing.T) {
	durs, apis := latencies(5000)
	start := time.Unix(1700000000, 0)
	runOf := func(t *testing.T, keep func(i int, api string) bool, incomplete bool) *Run {
		t.Helper()
		var d []time.Duration
		var a []string
		for i := range durs {
			if keep(i, apis[i]) {
				d, a = append(d, durs[i]), append(a, apis[i])
			}
		}
		dir := t.TempDir()
		writeShard(t, dir, load.Shard{}, d, a, start)
		if incomplete {
			p := filepath.Join(dir, load.Shard{}.Name(), load.ResultsFile)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			res, err := load.ReadResults(bytes.NewReader(b), p)
			if err != nil {
				t.Fatal(err)
			}
			res.Incomplete = "interrupted"
			var out bytes.Buffer
			if err := load.WriteResults(&out, res); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, out.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		run, err := Load(context.Background(), dir)
		if err != nil {
			t.Fatal(err)
		}
		return run
	}
	all := func(int, string) bool { return true }
	base := runOf(t, all, false)
	th := NoThresholds()
	th.MaxCountDecrease = 0.1
	metrics := func(vs []Violation) []string {
		var out []string
		for _, v := range vs {
			out = append(out, v.API+" "+v.Metric)
		}
		return out
	}
	cases := []struct {
		name string
		cand *Run
		th   func(*Thresholds)
		want []string
	}{
		{"same run", base, nil, nil},
		{"no requests", runOf(t, func(int, string) bool { return false }, false), nil,
			[]string{"total no_requests", "total count_decrease", "GET /a missing_api", "POST /b missing_api", "GET /c/{id} missing_api"}},
		{"an API lost", runOf(t, func(_ int, api string) bool { return api != "POST /b" }, false), func(th *Thresholds) { th.MaxCountDecrease = -1 },
			[]string{"POST /b missing_api"}},
		{"20% fewer requests", runOf(t, func(i int, _ string) bool { return i < 4000 }, false), nil, []string{"total count_decrease"}},
		{"20% fewer, 30% allowed", runOf(t, func(i int, _ string) bool { return i < 4000 }, false), func(th *Thresholds) { th.MaxCountDecrease = 0.3 }, nil},
		{"interrupted", runOf(t, all, true), nil, []string{"total incomplete"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			th := th
			if c.th != nil {
				c.th(&th)
			}
			r := NewReport(base, c.cand, th)
			got := metrics(r.Violations)
			slices.Sort(got)
			slices.Sort(c.want)
			if !slices.Equal(got, c.want) {
				t.Fatalf("violations %v, want %v", got, c.want)
			}
			for _, v := range r.Violations {
				if v.String() == "" {
					t.Errorf("violation %+v says nothing", v)
				}
			}
		})
	}
	if r := NewReport(runOf(t, func(int, string) bool { return false }, false), nil, NoThresholds()); len(r.Violations) != 1 || r.Violations[0].Metric != "no_requests" {
		t.Errorf("a single empty run: violations %v, want no_requests", r.Violations)
	}
}

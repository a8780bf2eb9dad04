package report_test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/replayer/diff"
	"github.com/retrace-dev/retrace/replayer/regress"
	"github.com/retrace-dev/retrace/replayer/replaytest"
	"github.com/retrace-dev/retrace/replayer/report"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// changedBuildReport records the shop v1, replays it against v2 (one
// changed response field for sku b, one changed downstream request for
// sku c) and one unreachable session, and writes the report into dir.
func changedBuildReport(t *testing.T, dir string) *report.Summary {
	t.Helper()
	prices := replaytest.NewPrices(t)
	rec := replaytest.NewRecorder(replaytest.Direct(replaytest.Addr(prices.URL)))
	shop := replaytest.NewShop(t, replaytest.ShopV1, rec.Downstream(replaytest.PricesDst))
	for i, sku := range []string{"a", "b", "c"} {
		rec.Send(t, replaytest.Addr(shop.URL), fmt.Sprintf("order-%d-%s", i, sku), replaytest.OrderRequest(sku, 2))
	}
	rec.Send(t, replaytest.Addr(shop.URL), "health", replaytest.HTTPRequest("GET", "/health", "shop", ""))
	sessions := rec.Sessions()
	broken := *sessions[0]
	broken.ID = "broken-recording"
	broken.Inbound.Response = []byte("not http")
	sessions = append(sessions, &broken)

	mock := replaytest.NewMock(t, sessions...)
	v2 := replaytest.NewShop(t, replaytest.ShopV2, replaytest.InMock(mock, replaytest.PricesDst))
	rules, err := diff.NewRules(diff.Rule{Ignore: "body.ts"}, diff.Rule{Ignore: "header.X-Request-Id", Scope: diff.ScopeDownstream})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := report.New(report.Options{Dir: dir, Target: v2.URL, NoiseRules: rules.List()})
	if err != nil {
		t.Fatal(err)
	}
	err = regress.Run(context.Background(), regress.Config{Source: regress.Sessions(sessions), Target: v2.URL,
		MockAdmin: mock.URL, Rules: rules, Concurrency: 4}, rep.Add)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := rep.Close()
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

func TestReportFiles(t *testing.T) {
	dir := t.TempDir()
	sum := changedBuildReport(t, dir)
	if sum.Sessions != 5 || sum.Passed != 2 || sum.Failed != 2 || sum.Errors != 1 {
		t.Fatalf("summary %+v", sum)
	}

	var js map[string]any
	b, err := os.ReadFile(filepath.Join(dir, report.SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &js); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]float64{"sessions": 5, "passed": 2, "failed": 2, "errors": 1} {
		if js[k] != want {
			t.Errorf("summary.json %s = %v, want %v", k, js[k], want)
		}
	}
	var back report.Summary
	json.Unmarshal(b, &back)
	apis := map[string]report.APISummary{}
	for _, a := range back.APIs {
		apis[a.API] = a
	}
	if a := apis["POST /orders"]; a.Sessions != 4 || a.Failed != 2 || a.Errors != 1 || a.Passed != 1 ||
		fmt.Sprint(a.Paths) != "[{body.order.total 1} {downstream http "+replaytest.PricesDst+": target 1}]" {
		t.Errorf("POST /orders: %+v", a)
	}
	if len(back.ErrorSessions) != 1 || back.ErrorSessions[0].Session != "broken-recording" || !strings.Contains(back.ErrorSessions[0].Error, "recorded response") {
		t.Errorf("error sessions %+v", back.ErrorSessions)
	}

	// JUnit: parses, counts agree, the failure names the field path.
	type tc struct {
		Name    string `xml:"name,attr"`
		Class   string `xml:"classname,attr"`
		Failure *struct {
			Message string `xml:"message,attr"`
			Text    string `xml:",chardata"`
		} `xml:"failure"`
		Error *struct {
			Message string `xml:"message,attr"`
		} `xml:"error"`
	}
	var ju struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Errors   int `xml:"errors,attr"`
		Suites   []struct {
			Cases []tc `xml:"testcase"`
		} `xml:"testsuite"`
	}
	b, err = os.ReadFile(filepath.Join(dir, report.JUnitFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(b, &ju); err != nil {
		t.Fatalf("junit.xml does not parse: %v\n%s", err, b)
	}
	if ju.Tests != 5 || ju.Failures != 2 || ju.Errors != 1 || len(ju.Suites) != 1 || len(ju.Suites[0].Cases) != 5 {
		t.Fatalf("junit counts %d/%d/%d, %d suites", ju.Tests, ju.Failures, ju.Errors, len(ju.Suites))
	}
	for _, c := range ju.Suites[0].Cases {
		switch c.Name {
		case "order-1-b":
			if c.Failure == nil || !strings.Contains(c.Failure.Message, "body.order.total") {
				t.Errorf("order-1-b failure %+v", c.Failure)
			}
		case "order-2-c":
			if c.Failure == nil || !strings.Contains(c.Failure.Text, "target changed: /price?sku=c → /price?sku=c&currency=EUR") {
				t.Errorf("order-2-c failure %+v", c.Failure)
			}
		case "broken-recording":
			if c.Error == nil {
				t.Errorf("broken-recording has no <error>")
			}
		default:
			if c.Failure != nil || c.Error != nil {
				t.Errorf("%s should pass: %+v", c.Name, c)
			}
		}
	}

	lines, err := os.ReadFile(filepath.Join(dir, report.SessionsFile))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(lines, []byte("\n")); n != 5 {
		t.Errorf("sessions.jsonl has %d lines", n)
	}
	if _, err := filepath.Glob(filepath.Join(dir, ".junit-cases-*")); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".junit-*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}

	var txt bytes.Buffer
	report.WriteText(&txt, sum)
	for _, want := range []string{"2 passed, 2 failed, 1 errors", "POST /orders", "GET /health", "FAIL order-1-b POST /orders: body.order.total",
		"ERROR broken-recording"} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("terminal summary lacks %q:\n%s", want, txt.String())
		}
	}
}

func TestHTMLIsSelfContained(t *testing.T) {
	dir := t.TempDir()
	changedBuildReport(t, dir)
	b, err := os.ReadFile(filepath.Join(dir, report.HTMLFile))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?i)(src|href)\s*=|@import|url\(`).Find(b); m != nil {
		t.Errorf("report.html loads an external resource: %q", m)
	}
	for _, want := range []string{`<mark data-path="body.order.total">`, `id="session-order-1-b"`, `id="session-order-2-c"`, `currency=EUR`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("report.html lacks %s", want)
		}
	}
}

// TestHTMLInChromium opens the report in headless Chromium: the DOM must
// hold the failing sessions with their highlighted fields; a screenshot
// is kept for CI.
func TestHTMLInChromium(t *testing.T) {
	chromium := testenv.Chromium(t)
	dir := t.TempDir()
	changedBuildReport(t, dir)
	page := "file://" + filepath.Join(dir, report.HTMLFile)
	chrome := func(args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--user-data-dir=" + t.TempDir()}
		cmd := exec.CommandContext(ctx, chromium, append(append(base, args...), page)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
		}
		return out
	}
	dom := string(chrome("--dump-dom"))
	for _, want := range []string{
		`id="total-failed">2<`,
		`<details class="session" id="session-order-1-b"`,
		`<mark data-path="body.order.total">`,
		`<code class="path">body.order.total</code>`,
		`<code class="path">target</code>`,
		`broken-recording`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the DOM Chromium built lacks %s", want)
		}
	}
	shots := os.Getenv("RETRACE_TEST_ARTIFACTS")
	if shots == "" {
		shots = t.TempDir()
	}
	shot := filepath.Join(shots, "replay-report.png")
	chrome("--screenshot="+shot, "--window-size=1280,2000")
	st, err := os.Stat(shot)
	if err != nil || st.Size() < 10000 {
		t.Errorf("screenshot %s: %v (%d bytes)", shot, err, sizeOf(st))
	}
}

func sizeOf(st os.FileInfo) int64 {
	if st == nil {
		return 0
	}
	return st.Size()
}

func TestMemoryIsBounded(t *testing.T) {
	rep, err := report.New(report.Options{MaxDetails: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5000; i++ {
		r := &regress.Result{Session: fmt.Sprint("s", i), API: fmt.Sprintf("GET /api%d", i%2000), Status: regress.Failed,
			Findings: []regress.Finding{{Difference: diff.Difference{Path: fmt.Sprintf("body.f%d", i), Kind: diff.Changed}, Where: regress.InResponse}},
			Detail:   &regress.Detail{Request: []byte("x")}}
		rep.Add(r)
	}
	s := rep.Summary()
	if s.Failed != 5000 || s.DetailsShown != 3 || len(s.FailedSessions) != 1000 || len(s.APIs) != 1001 || s.APIs[0].API != "(other APIs)" {
		t.Errorf("failed %d, details %d, refs %d, apis %d", s.Failed, s.DetailsShown, len(s.FailedSessions), len(s.APIs))
	}
}

func TestProgress(t *testing.T) {
	var b bytes.Buffer
	p := report.NewProgress(&b, 10)
	p.Update(report.Counts{Sessions: 5, Failed: 1})
	p.Update(report.Counts{Sessions: 6, Failed: 1}) // throttled
	p.Done(report.Counts{Sessions: 10, Failed: 2, Errors: 1})
	out := b.String()
	if !strings.Contains(out, "\r[###############---------------] 5/10  failed 1  errors 0") ||
		strings.Contains(out, "6/10") || !strings.HasSuffix(strings.TrimRight(out, " \n"), "/s") ||
		!strings.Contains(out, "[##############################] 10/10  failed 2  errors 1") {
		t.Errorf("progress output %q", out)
	}
}

// A replay in another environment lists the mock's destination decisions
// that were not exact, in summary.json and the text summary.
func TestDestinationDecisions(t *testing.T) {
	dir := t.TempDir()
	rep, err := report.New(report.Options{Dir: dir, Target: "http://sut"})
	if err != nil {
		t.Fatal(err)
	}
	rep.Destinations([]mockserver.DestDecision{
		{Live: "db:3306", Recorded: "db:3306", How: mockserver.HowExact},
		{Live: "db.staging:3306", Recorded: "mysql-primary.prod:3306", How: mockserver.HowAuto, Proto: "mysql", Reason: "best of 1"},
		{Live: "x:1", How: mockserver.HowNone, Reason: "no recording has a raw destination"},
	})
	sum, err := rep.Close()
	if err != nil {
		t.Fatal(err)
	}
	var onDisk report.Summary
	b, err := os.ReadFile(filepath.Join(dir, report.SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &onDisk); err != nil {
		t.Fatal(err)
	}
	if len(onDisk.Destinations) != 2 || onDisk.Destinations[0].Recorded != "mysql-primary.prod:3306" {
		t.Errorf("summary.json destinations: %+v", onDisk.Destinations)
	}
	var text bytes.Buffer
	report.WriteText(&text, sum)
	for _, want := range []string{"destination db.staging:3306 answered as mysql-primary.prod:3306 (auto) best of 1",
		"destination x:1 answered as nothing (every call a missing mock) (none)"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text summary lacks %q:\n%s", want, text.String())
		}
	}
	if strings.Contains(text.String(), "destination db:3306") {
		t.Errorf("an exact destination is listed:\n%s", text.String())
	}
}

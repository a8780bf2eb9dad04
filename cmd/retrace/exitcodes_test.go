package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/retrace-dev/retrace/replayer/load"
	"github.com/retrace-dev/retrace/replayer/replaytest"
)

// exitCase is one command line and the exit status the README's table
// gives it: 0 ok, 1 failures found (or a run cut short), 2 usage or bad
// input.
type exitCase struct {
	name string
	args []string
	code int
	// within, when set, cancels the command after this long (a server
	// that runs until interrupted, or an interrupted run).
	within time.Duration
	// check, when set, inspects what the command left behind.
	check func(t *testing.T, stdout, stderr string)
}

func runWithin(t *testing.T, d time.Duration, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if d > 0 {
		// A cancel, as SIGINT does, not a deadline: a deadline would also
		// bound the command's own connections.
		stop := time.AfterFunc(d, cancel)
		defer stop.Stop()
	}
	var out, errb bytes.Buffer
	p := &proc{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	code := run(ctx, p, args)
	return code, out.String(), errb.String()
}

// writeTimed writes n timed requests GET /x?i=… to a file.
func writeTimed(t *testing.T, path string, n int) {
	t.Helper()
	var buf bytes.Buffer
	w := load.NewWriter(&buf)
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for i := range n {
		if err := w.Write(&load.Request{At: at.Add(time.Duration(i) * time.Millisecond), Method: "GET", URL: "/x?i=" + string(rune('a'+i%26))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// TestExitCodes holds every command to the one exit-code table: each is
// run with a missing input, a bad flag value and a good input, and those
// that judge (replay, load, analyze) with a negative verdict and cut
// short.
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "does-not-exist")
	recs, mock := replayFixture(t)
	shop := replaytest.NewShop(t, replaytest.ShopV1, replaytest.Framed(mock.Addr(), replaytest.PricesDst))
	changed := replaytest.NewShop(t, replaytest.ShopV2, replaytest.Framed(mock.Addr(), replaytest.PricesDst))
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(150 * time.Millisecond)
		w.Write([]byte("ok"))
	}))
	defer slow.Close()
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer ok.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", http.StatusServiceUnavailable) }))
	defer failing.Close()

	timed := filepath.Join(dir, "requests.jsonl")
	writeTimed(t, timed, 40)
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte("{not json\nnor this\n"), 0o644)
	logFile := filepath.Join(dir, "access.log")
	os.WriteFile(logFile, []byte(`127.0.0.1 - - [01/Dec/2026:10:00:00 +0000] "GET /x HTTP/1.1" 200 2 "-" "curl"`+"\n"), 0o644)
	base, cand, empty := filepath.Join(dir, "base"), filepath.Join(dir, "cand"), filepath.Join(dir, "empty")
	report := func(name string) string { return filepath.Join(dir, "report-"+name) }
	summary := func(name string, complete bool) func(*testing.T, string, string) {
		return func(t *testing.T, stdout, stderr string) {
			s := readJSON(t, filepath.Join(report(name), "summary.json"))
			if s["complete"] != complete {
				t.Errorf("summary.json: complete %v, want %v\nstdout: %s\nstderr: %s", s["complete"], complete, stdout, stderr)
			}
		}
	}
	results := func(out, incomplete string) func(*testing.T, string, string) {
		return func(t *testing.T, _, _ string) {
			r := readJSON(t, filepath.Join(out, "shard-0-of-1", load.ResultsFile))
			if got, _ := r["incomplete"].(string); got != incomplete {
				t.Errorf("results.json: incomplete %q, want %q", got, incomplete)
			}
		}
	}
	loadArgs := func(target, out string, more ...string) []string {
		return append([]string{"load", "--input", timed, "--target", target, "--out", out, "--mode", "max", "--progress", "off"}, more...)
	}

	// Ordered: later cases read what earlier ones wrote (load results).
	cases := map[string][]exitCase{
		"analyze": {
			{name: "missing input", args: []string{"analyze", missing}, code: 2},
			{name: "bad flag value", args: []string{"analyze", base, "--max-error-rate", "lots"}, code: 2},
		},
		"demo": {
			{name: "missing input", args: []string{"demo", "traffic"}, code: 2},
			{name: "bad flag value", args: []string{"demo", "--requests", "-5"}, code: 2},
			{name: "good", args: []string{"demo", "downstreams", "--mysql", "127.0.0.1:0", "--redis", "127.0.0.1:0", "--pricing", "127.0.0.1:0", "--fraud", "127.0.0.1:0"},
				code: 0, within: time.Second},
		},
		"extract": {
			{name: "missing input", args: []string{"extract", "--from", missing}, code: 2},
			{name: "bad flag value", args: []string{"extract", "--from", recs, "--since", "yesterday"}, code: 2},
			{name: "no valid line", args: []string{"extract", "--from", bad, "--format", "jsonl", "--out", filepath.Join(dir, "x.jsonl")}, code: 2},
			{name: "good", args: []string{"extract", "--from", recs, "--out", filepath.Join(dir, "extracted.jsonl")}, code: 0},
			{name: "good log", args: []string{"extract", "--from", logFile, "--out", filepath.Join(dir, "fromlog.jsonl")}, code: 0},
		},
		"load": {
			{name: "missing input", args: []string{"load", "--input", missing, "--target", ok.URL, "--out", filepath.Join(dir, "l1")}, code: 2},
			{name: "bad flag value", args: []string{"load", "--input", timed, "--target", ok.URL, "--out", filepath.Join(dir, "l2"), "--concurrency", "-5"}, code: 2},
			{name: "no valid line", args: []string{"load", "--input", bad, "--target", ok.URL, "--out", filepath.Join(dir, "l3"), "--progress", "off"}, code: 2},
			{name: "good", args: loadArgs(ok.URL, base), code: 0, check: results(base, "")},
			{name: "good candidate", args: loadArgs(ok.URL, cand), code: 0},
			{name: "nothing sent", args: loadArgs(ok.URL, empty, "--duration", "1ns"), code: 1},
			{name: "every request failed", args: loadArgs(failing.URL, filepath.Join(dir, "l4")), code: 1},
			{name: "max error rate", args: loadArgs(failing.URL, filepath.Join(dir, "l5"), "--max-error-rate", "1%"), code: 1},
			{name: "interrupted", args: []string{"load", "--input", timed, "--target", slow.URL, "--out", filepath.Join(dir, "l6"), "--mode", "rate",
				"--rate", "20", "--duration", "1m", "--progress", "off"}, code: 1, within: 400 * time.Millisecond, check: results(filepath.Join(dir, "l6"), "interrupted")},
		},
		"mock": {
			{name: "missing input", args: []string{"mock", "--recordings", missing, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, code: 2},
			{name: "bad flag value", args: []string{"mock", "--recordings", recs, "--max-frame", "-1"}, code: 2},
			{name: "admin beyond loopback without a token", args: []string{"mock", "--recordings", recs, "--listen", "127.0.0.1:0", "--admin", "0.0.0.0:0"}, code: 2,
				within: 2 * time.Second}, // a server that starts would run until then
			{name: "good", args: []string{"mock", "--recordings", recs, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, code: 0, within: 500 * time.Millisecond},
		},
		"prepare": {
			{name: "missing input", args: []string{"prepare", "--in", missing, "--out", filepath.Join(dir, "p1.jsonl")}, code: 2},
			{name: "bad flag value", args: []string{"prepare", "--in", timed, "--header", "no colon", "--out", filepath.Join(dir, "p2.jsonl")}, code: 2},
			{name: "no valid line", args: []string{"prepare", "--in", bad, "--out", filepath.Join(dir, "p3.jsonl")}, code: 2},
			{name: "good", args: []string{"prepare", "--in", timed, "--out", filepath.Join(dir, "p4.jsonl")}, code: 0},
		},
		"recordings": {
			{name: "missing input", args: []string{"recordings", missing}, code: 2},
			{name: "bad flag value", args: []string{"recordings", "--list=maybe", recs}, code: 2},
			{name: "good", args: []string{"recordings", recs}, code: 0},
		},
		"replay": {
			{name: "missing input", args: []string{"replay", "--recordings", missing, "--target", shop.URL}, code: 2},
			{name: "bad flag value", args: []string{"replay", "--recordings", recs, "--target", shop.URL, "--concurrency", "-5"}, code: 2},
			{name: "good", args: []string{"replay", "--recordings", recs, "--target", shop.URL, "--mock-admin", mock.AdminURL(),
				"--detect-noise", "2", "--report", report("good")}, code: 0, check: summary("good", true)},
			{name: "failures found", args: []string{"replay", "--recordings", recs, "--target", changed.URL, "--mock-admin", mock.AdminURL(),
				"--detect-noise", "2", "--report", report("changed")}, code: 1, check: summary("changed", true)},
			{name: "interrupted", args: []string{"replay", "--recordings", recs, "--target", slow.URL, "--concurrency", "1",
				"--report", report("interrupted")}, code: 1, within: 400 * time.Millisecond, check: summary("interrupted", false)},
		},
		"version": {
			{name: "bad flag value", args: []string{"version", "--nope=1"}, code: 2},
			{name: "good", args: []string{"version"}, code: 0},
		},
	}
	// analyze reads the load results written above.
	cases["analyze"] = append(cases["analyze"],
		exitCase{name: "good", args: []string{"analyze", base}, code: 0},
		exitCase{name: "good compare", args: []string{"analyze", base, "--compare", cand}, code: 0},
		exitCase{name: "candidate without requests", args: []string{"analyze", base, "--compare", empty}, code: 1,
			check: func(t *testing.T, _, stderr string) {
				for _, want := range []string{"no request was sent", "the candidate sent none"} {
					if !strings.Contains(stderr, want) {
						t.Errorf("stderr does not say %q: %s", want, stderr)
					}
				}
			}},
		exitCase{name: "threshold crossed", args: []string{"analyze", base, "--compare", cand, "--max-p99", "1ns"}, code: 1},
	)

	for name := range commands {
		if len(cases[name]) == 0 {
			t.Errorf("command %s has no exit-code cases", name)
		}
	}
	order := []string{"version", "recordings", "extract", "prepare", "load", "analyze", "mock", "replay", "demo"}
	for name := range cases {
		if !slices.Contains(order, name) {
			t.Fatalf("case group %s is not run", name)
		}
	}
	for _, name := range order {
		for _, c := range cases[name] {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				code, out, errs := runWithin(t, c.within, c.args...)
				if code != c.code {
					t.Fatalf("retrace %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(c.args, " "), code, c.code, out, errs)
				}
				if code != 0 && !strings.Contains(errs, "retrace "+name) {
					t.Errorf("exit %d without a message naming the command: %q", code, errs)
				}
				if c.check != nil {
					c.check(t, out, errs)
				}
			})
		}
	}
}

// RETRACE_MOCK_ADMIN_TOKEN is the admin token of retrace mock (so an
// admin address beyond loopback is accepted) and is never printed.
func TestMockAdminTokenFromEnvironment(t *testing.T) {
	recs := t.TempDir()
	const secret = "env-secret-token"
	env := func(k string) string {
		if k == mockTokenEnv {
			return secret
		}
		return ""
	}
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"mock", "--recordings", recs, "--listen", "127.0.0.1:0", "--admin", "0.0.0.0:0"}, 0},
		{[]string{"mock", "--help"}, 0},
		{[]string{"replay", "--help"}, 0},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		stop := time.AfterFunc(500*time.Millisecond, cancel)
		var out, errb bytes.Buffer
		code := run(ctx, &proc{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: env}, c.args)
		stop.Stop()
		cancel()
		if code != c.code {
			t.Errorf("retrace %s: exit %d, want %d\n%s", strings.Join(c.args, " "), code, c.code, errb.String())
		}
		if strings.Contains(out.String()+errb.String(), secret) {
			t.Errorf("retrace %s printed the token", strings.Join(c.args, " "))
		}
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/replayer/diff"
	"github.com/retrace-dev/retrace/replayer/replaytest"
)

// replayFixture records the test shop against its real price service into
// a recordings directory and starts the real mock server over it.
func replayFixture(t *testing.T) (dir string, mock *mockserver.Server) {
	t.Helper()
	prices := replaytest.NewPrices(t)
	rec := replaytest.NewRecorder(replaytest.Direct(replaytest.Addr(prices.URL)))
	shop := replaytest.NewShop(t, replaytest.ShopV1, rec.Downstream(replaytest.PricesDst))
	for i, sku := range []string{"a", "b", "c", "a", "d"} {
		rec.Send(t, replaytest.Addr(shop.URL), fmt.Sprintf("order-%d-%s", i, sku), replaytest.OrderRequest(sku, i+1))
	}
	rec.Send(t, replaytest.Addr(shop.URL), "health-1", replaytest.HTTPRequest("GET", "/health", "shop", ""))
	dir = t.TempDir()
	replaytest.WriteStore(t, dir, rec.Sessions()...)
	return dir, mocktest.NewServer(t, mockserver.Config{}, rec.Sessions()...)
}

func runReplayCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	p := &proc{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	code = run(context.Background(), p, append([]string{"replay"}, args...))
	return code, out.String(), errb.String()
}

func TestReplayCommand(t *testing.T) {
	dir, mock := replayFixture(t)
	v1 := replaytest.NewShop(t, replaytest.ShopV1, replaytest.Framed(mock.Addr(), replaytest.PricesDst))
	v2 := replaytest.NewShop(t, replaytest.ShopV2, replaytest.Framed(mock.Addr(), replaytest.PricesDst))
	reportDir := t.TempDir()

	// Same build, noise detected first: exit 0, every session passes.
	code, out, errs := runReplayCmd(t, "--recordings", dir, "--target", v1.URL, "--mock-admin", mock.AdminURL(),
		"--concurrency", "4", "--detect-noise", "2", "--report", reportDir)
	if code != 0 {
		t.Fatalf("same build: exit %d\n%s\n%s", code, out, errs)
	}
	var sum map[string]any
	b, err := os.ReadFile(filepath.Join(reportDir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(b, &sum)
	if sum["sessions"] != 6.0 || sum["passed"] != 6.0 || sum["failed"] != 0.0 || sum["errors"] != 0.0 {
		t.Errorf("summary.json %s", b)
	}
	noise := filepath.Join(reportDir, "noise-rules.json")
	if _, err := diff.LoadRules(noise); err != nil {
		t.Fatalf("the noise rules file does not load: %v", err)
	}
	if !strings.Contains(errs, "noise-rules.json") {
		t.Errorf("stderr does not say where the noise rules are: %s", errs)
	}

	// The changed build with the kept rules file: exit 1, the failing
	// sessions and paths are named.
	code, out, errs = runReplayCmd(t, "--recordings", dir, "--target", v2.URL, "--mock-admin", mock.AdminURL(),
		"--rules", noise, "--report", t.TempDir())
	if code != 1 {
		t.Fatalf("changed build: exit %d\n%s\n%s", code, out, errs)
	}
	for _, want := range []string{"4 passed, 2 failed, 0 errors", "FAIL order-1-b POST /orders: body.order.total",
		"FAIL order-2-c POST /orders: downstream #0 http " + replaytest.PricesDst + ": target", "2 of 6 sessions failed"} {
		if !strings.Contains(out+errs, want) {
			t.Errorf("output lacks %q:\n%s\n%s", want, out, errs)
		}
	}

	// Selection: only sku c by id, and only GET APIs.
	code, out, _ = runReplayCmd(t, "--recordings", dir, "--target", v2.URL, "--mock-admin", mock.AdminURL(),
		"--rules", noise, "--report", t.TempDir(), "--id", "order-2-c")
	if code != 1 || !strings.Contains(out, "replayed 1 sessions") {
		t.Errorf("--id: exit %d\n%s", code, out)
	}
	code, out, _ = runReplayCmd(t, "--recordings", dir, "--target", v2.URL, "--mock-admin", mock.AdminURL(),
		"--rules", noise, "--report", t.TempDir(), "--api", "GET *", "--repeat", "3")
	if code != 0 || !strings.Contains(out, "replayed 3 sessions") {
		t.Errorf("--api GET --repeat 3: exit %d\n%s", code, out)
	}

	// A/B: baseline and candidate are both v2, so its differences are
	// pre-existing: exit 0.
	code, out, errs = runReplayCmd(t, "--recordings", dir, "--target", v2.URL, "--baseline", v2.URL, "--mock-admin", mock.AdminURL(),
		"--rules", noise, "--report", t.TempDir())
	if code != 0 || !strings.Contains(out, "2 sessions have differences the baseline shows too") {
		t.Errorf("A/B: exit %d\n%s\n%s", code, out, errs)
	}
}

func TestReplayCommandUsageErrors(t *testing.T) {
	dir := t.TempDir()
	badRules := filepath.Join(dir, "rules.json")
	os.WriteFile(badRules, []byte("{\"version\":1,\"rules\":[\n  {\"ignore\":\"body.ts\"},\n  {\"ignore\":\"body.items[\"}\n]}"), 0o644)
	recs := t.TempDir()
	live := httptest.NewServer(http.NotFoundHandler())
	defer live.Close()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no recordings", []string{"--target", "http://127.0.0.1:1"}, "--recordings is required"},
		{"no target", []string{"--recordings", recs}, "--target is required"},
		{"bad sample", []string{"--recordings", recs, "--target", "http://127.0.0.1:1", "--sample", "2"}, "--sample 2"},
		{"bad since", []string{"--recordings", recs, "--target", "http://127.0.0.1:1", "--since", "yesterday"}, "RFC 3339"},
		{"missing recordings", []string{"--recordings", filepath.Join(dir, "nope"), "--target", "http://127.0.0.1:1"}, "nope"},
		{"bad rules", []string{"--recordings", recs, "--target", "http://127.0.0.1:1", "--rules", badRules}, badRules + ":3:3: rules[1]: \"ignore\""},
		{"bad target", []string{"--recordings", recs, "--target", "ftp://x", "--report", t.TempDir()}, "scheme must be http or https"},
		{"nothing selected", []string{"--recordings", recs, "--target", live.URL, "--report", t.TempDir()}, "no recorded session matched"},
		{"target down", []string{"--recordings", recs, "--target", "http://127.0.0.1:1", "--report", t.TempDir()}, "candidate target http://127.0.0.1:1"},
		{"ca and insecure", []string{"--recordings", recs, "--target", "https://127.0.0.1:1", "--ca", badRules, "--insecure"}, "--ca and --insecure"},
		{"missing ca", []string{"--recordings", recs, "--target", "https://127.0.0.1:1", "--ca", filepath.Join(dir, "ca.pem")}, "ca.pem"},
		{"ca with no certificate", []string{"--recordings", recs, "--target", "https://127.0.0.1:1", "--ca", badRules}, "no PEM certificate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runReplayCmd(t, tc.args...)
			if code != 2 || !strings.Contains(errs, tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q (stdout %q)", code, errs, tc.want, out)
			}
		})
	}
}

func TestReplayCommandTargetDown(t *testing.T) {
	dir, mock := replayFixture(t)
	code, out, errs := runReplayCmd(t, "--recordings", dir, "--target", "http://127.0.0.1:1", "--mock-admin", mock.AdminURL(),
		"--report", t.TempDir(), "--timeout", "2s")
	if code != 2 || !strings.Contains(errs, "not reachable: candidate target http://127.0.0.1:1") {
		t.Errorf("exit %d\n%s\n%s", code, out, errs)
	}
}

// TestReplayGRPCCommand: recorded gRPC sessions of a real grpc-go server
// replayed by the command against a build whose UnaryCall answers another
// username: with --grpc-reflection (and with a descriptor set) the
// failing field is named, and report.html shows it marked.
func TestReplayGRPCCommand(t *testing.T) {
	dir := t.TempDir()
	replaytest.WriteStore(t, dir, replaytest.RecordGRPC(t, 4)...)
	same := replaytest.ServeGRPC(t, &grpctest.Service{})
	code, out, errs := runReplayCmd(t, "--recordings", dir, "--target", same, "--report", t.TempDir())
	if code != 0 {
		t.Fatalf("same build: exit %d\n%s\n%s", code, out, errs)
	}
	changed := replaytest.ServeGRPC(t, &replaytest.ChangedGRPC{Username: "other"})
	reportDir := t.TempDir()
	code, out, errs = runReplayCmd(t, "--recordings", dir, "--target", changed, "--grpc-reflection", "--report", reportDir)
	if code != 1 || !strings.Contains(out, "FAIL t00-unary POST /grpc.testing.TestService/UnaryCall: message[0].username") {
		t.Fatalf("changed build: exit %d\n%s\n%s", code, out, errs)
	}
	html, err := os.ReadFile(filepath.Join(reportDir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(html), `<mark data-path="message[0].username">message[0].username  other</mark>`) {
		t.Errorf("report.html does not mark the replayed username")
	}
	if code, _, errs := runReplayCmd(t, "--recordings", dir, "--target", changed, "--proto-descriptors", filepath.Join(dir, "none.protoset")); code != 2 || !strings.Contains(errs, "none.protoset") {
		t.Errorf("missing descriptor set: exit %d, %s", code, errs)
	}
	if code, _, errs := runReplayCmd(t, "--recordings", dir, "--target", changed, "--proto-descriptors", "x", "--grpc-reflection"); code != 2 {
		t.Errorf("both schema flags: exit %d, %s", code, errs)
	}
}

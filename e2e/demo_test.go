package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrace-dev/retrace/examples/fraud"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/replayer/report"
	"github.com/retrace-dev/retrace/wire/http2"
)

// TestDemo runs `retrace demo` as a user does and checks its exit status,
// its narration and the summaries it leaves behind.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: builds binaries and runs the demo")
	}
	retrace, _ := binaries(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, retrace, "demo", "--dir", dir)
	cmd.Env = append(os.Environ(), "RETRACE_MODE=") // the demo's own process is never patched
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	elapsed := time.Since(start)
	keepArtifact(t, "demo-output.txt", out.Bytes())
	if err != nil {
		t.Fatalf("retrace demo: %v after %v\n%s", err, elapsed, out.String())
	}
	t.Logf("retrace demo took %v", elapsed)
	text := out.String()
	for _, want := range []string{
		"== 1. Downstreams", "== 2. Record", "== 3. Traffic", "== 4. Every downstream stops", "== 5. Mock server",
		"== 6. Replay", "== 7. Replay against a changed build", "== 8. Load replay", "== 9. Done",
		"recorded 300 sessions", "report.html", "p99", "demo passed",
		"gRPC   (fraud-check service)",
		// the example session's fraud calls, decoded by field name
		"gRPC " + fraud.ScreenMethod + " {", "gRPC " + fraud.CheckMethod + " {", "grpc-status 0 {allow=",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	var sum, changed report.Summary
	readJSON(t, filepath.Join(dir, "replay-report", report.SummaryFile), &sum)
	readJSON(t, filepath.Join(dir, "replay-report-changed", report.SummaryFile), &changed)
	if sum.Sessions != 300 || sum.Passed != 300 {
		t.Errorf("replay summary: %d sessions, %d passed, %d failed, %d errors", sum.Sessions, sum.Passed, sum.Failed, sum.Errors)
	}
	if changed.Sessions != 300 || changed.Failed == 0 || changed.Errors != 0 {
		t.Errorf("changed-build summary: %d sessions, %d passed, %d failed, %d errors", changed.Sessions, changed.Passed, changed.Failed, changed.Errors)
	}
	// the changed build's fraud checks are caught field by field, by name
	var grpcPath bool
	for _, a := range changed.APIs {
		for _, p := range a.Paths {
			grpcPath = grpcPath || (a.API == "POST /orders" && strings.HasSuffix(p.Path, "message[*].total_cents") && p.Sessions > 0)
		}
	}
	if !grpcPath {
		t.Errorf("changed-build summary names no fraud-check field: %+v", changed.APIs)
	}
	// the pricing service is HTTPS: its calls are recorded in plaintext,
	// marked TLS, and no TLS record was recorded
	recs, err := filepath.Glob(filepath.Join(dir, "recordings", "*"))
	if err != nil || len(recs) == 0 {
		t.Errorf("no recordings in %s: %v", dir, err)
	}
	var tlsCalls int
	for _, f := range recs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for line := range bytes.Lines(b) {
			if bytes.Contains(line, []byte(`"tls":true`)) && bytes.Contains(line, []byte(`GET /price?`)) {
				tlsCalls++
			}
		}
	}
	if tlsCalls == 0 {
		t.Error("no session has a pricing call recorded in plaintext and marked tls")
	}
	// every order created made its two fraud-check calls, recorded as grpc
	store, err := recording.Open(context.Background(), filepath.Join(dir, "recordings"))
	if err != nil {
		t.Fatal(err)
	}
	var created, fraudCalls int
	store.Scan(context.Background(), func(se *recording.Session) error {
		if strings.Contains(firstLine(se.Inbound.Response), " 201 ") {
			created++
		}
		for _, c := range se.Calls {
			if c.Proto == http2.GRPCName && !c.Setup {
				fraudCalls++
			}
		}
		return nil
	})
	store.Close()
	if created == 0 || fraudCalls < 2*created {
		t.Errorf("%d orders created, %d grpc calls recorded; want two per order", created, fraudCalls)
	}
	for _, f := range []string{"replay-report/report.html", "load/requests.jsonl", "load/results/shard-0-of-1/results.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Error(err)
		return
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Errorf("%s: %v", path, err)
	}
}

// keepArtifact saves b for CI when RETRACE_TEST_ARTIFACTS names a directory.
func keepArtifact(t *testing.T, name string, b []byte) {
	if d := os.Getenv("RETRACE_TEST_ARTIFACTS"); d != "" {
		if err := os.WriteFile(filepath.Join(d, name), b, 0o644); err != nil {
			t.Logf("artifact %s: %v", name, err)
		}
	}
}

// keepDir copies dir to RETRACE_TEST_ARTIFACTS/name when that names a
// directory, for a failing test's evidence.
func keepDir(t *testing.T, dir, name string) {
	d := os.Getenv("RETRACE_TEST_ARTIFACTS")
	if d == "" {
		return
	}
	dst := filepath.Join(d, name)
	if err := os.CopyFS(dst, os.DirFS(dir)); err != nil {
		t.Logf("keeping %s: %v", dir, err)
		return
	}
	t.Logf("evidence kept in %s", dst)
}

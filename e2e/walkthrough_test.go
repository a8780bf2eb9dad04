package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Markers around the README's walkthrough: a fenced sh block that this test
// runs as one bash script, so the README cannot rot.
const (
	walkthroughStart = "<!-- walkthrough:start -->"
	walkthroughEnd   = "<!-- walkthrough:end -->"
	// walkthroughEnv names another Markdown file to take the block from
	// (to try a README change before making it).
	walkthroughEnv = "RETRACE_WALKTHROUGH"
)

// walkthrough returns the shell commands of the marked block of the
// Markdown file at path.
func walkthrough(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	_, rest, ok := strings.Cut(string(b), walkthroughStart)
	if !ok {
		return "", errors.New(path + " has no " + walkthroughStart + " marker")
	}
	block, _, ok := strings.Cut(rest, walkthroughEnd)
	if !ok {
		return "", errors.New(path + " has no " + walkthroughEnd + " marker after " + walkthroughStart)
	}
	block = strings.TrimSpace(block)
	body, ok := strings.CutPrefix(block, "```sh\n")
	if !ok {
		body, ok = strings.CutPrefix(block, "```bash\n")
	}
	body, ok2 := strings.CutSuffix(body, "```")
	if !ok || !ok2 {
		return "", errors.New(path + ": the walkthrough block is not one ```sh fenced block")
	}
	return body, nil
}

func TestWalkthroughBlock(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, md, want, err string
	}{
		{"ok", "x\n" + walkthroughStart + "\n```sh\necho hi\n```\n" + walkthroughEnd + "\ny", "echo hi\n", ""},
		{"no start", "```sh\necho\n```", "", "no " + walkthroughStart},
		{"no end", walkthroughStart + "\n```sh\necho\n```", "", "no " + walkthroughEnd},
		{"no fence", walkthroughStart + "\necho\n" + walkthroughEnd, "", "not one ```sh fenced block"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name+".md")
			if err := os.WriteFile(p, []byte(tc.md), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := walkthrough(p)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestWalkthrough runs the README's 5-minute walkthrough, every command of
// it, from the repository root in a clean environment.
func TestWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: builds binaries and runs the walkthrough")
	}
	root := moduleRoot(t)
	md := os.Getenv(walkthroughEnv)
	if md == "" {
		md = filepath.Join(root, "README.md")
	}
	script, err := walkthrough(md)
	if err != nil {
		if os.Getenv("CI") == "" && os.Getenv(walkthroughEnv) == "" {
			t.Skipf("%v (set %s to a Markdown file with the block to run one)", err, walkthroughEnv)
		}
		t.Fatal(err)
	}
	// The servers the walkthrough starts in the background are stopped
	// when the script ends, however it ends.
	script = "trap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT\n" + script
	logPath := filepath.Join(t.TempDir(), "walkthrough.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// On timeout kill the whole process group: servers started in the
	// background would outlive bash.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = cleanEnv("TMPDIR=" + t.TempDir())
	// A file, not a pipe: a process that outlives the script (the go
	// command's telemetry helper, say) cannot keep Wait from returning.
	cmd.Stdout, cmd.Stderr = logf, logf
	err = cmd.Run()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	out, rerr := os.ReadFile(logPath)
	if rerr != nil {
		t.Fatal(rerr)
	}
	keepArtifact(t, "walkthrough-output.txt", out)
	if err != nil {
		t.Fatalf("walkthrough: %v\n%s", err, out)
	}
	for _, want := range []string{`"order_id":"100000001"`, "200 requests", "report.html", "p99"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("walkthrough output lacks %q", want)
		}
	}
	t.Logf("%s", out)
}

// cleanEnv is this process's environment without the agent's and the
// example's variables, plus extra.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "RETRACE_") || strings.HasPrefix(kv, "ORDERS_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

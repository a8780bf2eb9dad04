package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/proto"

	"github.com/retrace-dev/retrace/internal/demo"
	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/replayer/analyze"
	"github.com/retrace-dev/retrace/replayer/report"
	grpcwire "github.com/retrace-dev/retrace/wire/grpc"
	"github.com/retrace-dev/retrace/wire/http2"
)

const (
	grpcTraces = 64 // concurrent inbound RPCs recorded, each its own trace
	// every grpcStreamEvery-th trace is a StreamingOutputCall, the others
	// UnaryCall
	grpcStreamEvery = 4
	unaryPath       = "/grpc.testing.TestService/UnaryCall"
	streamPath      = "/grpc.testing.TestService/StreamingOutputCall"
	duplexPath      = "/grpc.testing.TestService/FullDuplexCall"
	healthPath      = "/grpc.health.v1.Health/Check"
)

// The downstream calls grpcfront's UnaryCall makes per trace, by path
// (grpctest.Exercise).
var exercisePaths = []string{unaryPath, unaryPath, streamPath, duplexPath, healthPath}

// TestGRPCServiceRecordReplayLoad is issue 25's end-to-end story: grpcfront,
// a grpc-go service built with the agent's blank import, calls a grpc-go
// downstream (TestService and health) over one shared ClientConn.
//
//  1. Record: 64 concurrent RPCs (unary ones making five downstream calls
//     each: unary, unary with a status, server streaming, a bidirectional
//     ping-pong, health; streaming ones relaying a downstream stream). Each
//     is one session of proto grpc whose calls all carry its own tag, no
//     retrace-* field in any recorded header block or at the downstream.
//  2. Replay with `retrace replay` against grpcfront in replay mode, the
//     downstream stopped, every call answered by `retrace mock`: all 64
//     sessions pass, and no connection reaches the downstream. A build
//     that answers differently fails exactly its unary sessions.
//  3. Load: `retrace extract` and `retrace load` against grpcfront (agent
//     off, downstream back), at max rate and at 4× the recorded pace: every
//     recorded RPC sent and answered OK, per-method counts and percentiles.
func TestGRPCServiceRecordReplayLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: builds binaries and records, replays and loads a gRPC service")
	}
	retrace, _ := binaries(t)
	dir := t.TempDir()
	t.Cleanup(func() {
		if t.Failed() {
			keepDir(t, dir, t.Name())
		}
	})
	recDir := filepath.Join(dir, "recordings")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	downstream := grpctest.Serve(t, ln)
	proxy := newProxy(t, ln.Addr().String())

	// 1. Record.
	rec := startFront(t, dir, "record", proxy.Addr(), "RETRACE_MODE=record", "RETRACE_RECORD="+recDir, "RETRACE_APP=grpcfront")
	answers := callFront(t, rec.Addr())
	for tag, a := range answers {
		if a.err != nil {
			t.Fatalf("recording: %s: %v", tag, a.err)
		}
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	all := readSessions(recDir)
	checkGRPCSessions(t, inboundOnly(all), proxy.Addr())
	for _, md := range downstream.Seen {
		for k := range md {
			if strings.HasPrefix(k, "retrace-") {
				t.Errorf("the downstream saw metadata %s: %v", k, md[k])
			}
		}
	}
	if t.Failed() {
		return
	}

	// 2. Replay, the downstream stopped.
	proxy.Stop()
	before := proxy.Accepted()
	mock := startMockBinary(t, retrace, recDir, filepath.Join(dir, "mock.log"))
	rep := startFront(t, dir, "replay", proxy.Addr(), "RETRACE_MODE=replay", "RETRACE_MOCK_ADDR="+mock.addr)
	sum := replayCLI(t, retrace, recDir, "http://"+rep.Addr(), mock.admin, filepath.Join(dir, "report"))
	if sum.Sessions != grpcTraces || sum.Passed != grpcTraces {
		t.Errorf("replay: %d sessions, %d passed, %d failed, %d errors; want all %d passed", sum.Sessions, sum.Passed, sum.Failed, sum.Errors, grpcTraces)
	}
	if err := rep.Stop(); err != nil {
		t.Fatal(err)
	}
	changed := startFront(t, dir, "changed", proxy.Addr(), "RETRACE_MODE=replay", "RETRACE_MOCK_ADDR="+mock.addr, "GRPCFRONT_VARIANT=changed")
	// with the target's server reflection, the difference is named by field
	csum := replayCLI(t, retrace, recDir, "http://"+changed.Addr(), mock.admin, filepath.Join(dir, "report-changed"), "--grpc-reflection")
	unary := grpcTraces - grpcTraces/grpcStreamEvery
	if csum.Sessions != grpcTraces || csum.Failed != unary || csum.Passed != grpcTraces-unary || csum.Errors != 0 {
		t.Errorf("replay of the changed build: %d sessions, %d passed, %d failed, %d errors; want the %d unary ones failed, the others passed",
			csum.Sessions, csum.Passed, csum.Failed, csum.Errors, unary)
	}
	for _, a := range csum.APIs {
		if a.Failed == 0 {
			continue
		}
		if len(a.Paths) != 1 || a.Paths[0].Path != "message[*].payload.body" || a.Paths[0].Sessions != unary {
			t.Errorf("replay of the changed build: %s differs at %+v, want only at message[*].payload.body in %d sessions", a.API, a.Paths, unary)
		}
	}
	if err := changed.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := proxy.Accepted(); got != before {
		t.Errorf("%d connections reached the stopped downstream during replay", got-before)
	}
	mock.stop(t)

	// 3. Load, agent off, downstream back.
	proxy.Start()
	plain := startFront(t, dir, "load", proxy.Addr())
	reqs := filepath.Join(dir, "requests.jsonl")
	runCLI(t, retrace, "extract", "--from", recDir, "--out", reqs)
	for _, mode := range [][]string{{"--mode", "max", "--concurrency", "16"}, {"--mode", "original", "--speed", "4"}} {
		loadDir := filepath.Join(dir, "load-"+mode[1])
		runCLI(t, retrace, append([]string{"load", "--input", reqs, "--target", "http://" + plain.Addr(), "--out", loadDir}, mode...)...)
		run, err := analyze.Load(context.Background(), loadDir)
		if err != nil {
			t.Fatal(err)
		}
		// every recorded RPC sent, answered OK, counted under its method
		want := map[string]int64{"POST " + unaryPath: int64(unary), "POST " + streamPath: int64(grpcTraces - unary)}
		got := map[string]int64{}
		for _, e := range analyze.Summarize(run).APIs {
			t.Logf("load %s: %s ×%d, %d errors, p50 %.2f ms, p99 %.2f ms, max %.2f ms, status %v", mode[1], e.API, e.Count, e.Errors, e.P50Ms, e.P99Ms, e.MaxMs, e.Status)
			got[e.API] = e.Count
			if e.Errors != 0 || e.Status["grpc-0"] != e.Count {
				t.Errorf("load %s of %s: %d errors, statuses %v; want every call grpc-0", mode[1], e.API, e.Errors, e.Status)
				logErrors(t, loadDir)
			}
			if e.P50Ms <= 0 || e.P99Ms < e.P50Ms || e.MaxMs < e.P99Ms {
				t.Errorf("load %s of %s: percentiles p50 %.3f p99 %.3f max %.3f", mode[1], e.API, e.P50Ms, e.P99Ms, e.MaxMs)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("load %s: calls per method %v, want %v", mode[1], got, want)
		}
	}
	if err := plain.Stop(); err != nil {
		t.Fatal(err)
	}
}

// frontAnswer is what one inbound RPC got.
type frontAnswer struct {
	path string
	err  error
}

// tagOf is the tag of trace i: fixed width, so no tag is a prefix of
// another.
func tagOf(i int) string { return fmt.Sprintf("trace-%03d", i) }

// callFront makes grpcTraces concurrent RPCs to grpcfront at addr over one
// ClientConn and checks each answer; it returns them by tag.
func callFront(t *testing.T, addr string) map[string]frontAnswer {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := testpb.NewTestServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	out := map[string]frontAnswer{}
	var wg sync.WaitGroup
	for i := range grpcTraces {
		wg.Go(func() {
			tag := tagOf(i)
			a := frontAnswer{path: unaryPath}
			if i%grpcStreamEvery == grpcStreamEvery-1 {
				a.path = streamPath
				a.err = streamFront(ctx, c, tag)
			} else {
				r, err := c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(tag)}})
				a.err = err
				if want := tag + ": 5 downstream calls answered"; err == nil && string(r.GetPayload().GetBody()) != want {
					a.err = fmt.Errorf("answer %q, want %q", r.GetPayload().GetBody(), want)
				}
			}
			mu.Lock()
			out[tag] = a
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// streamFront asks grpcfront for three messages relayed from the
// downstream and checks them.
func streamFront(ctx context.Context, c testpb.TestServiceClient, tag string) error {
	sizes := []int32{5, 4000, 1}
	req := &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte(tag)}}
	for _, s := range sizes {
		req.ResponseParameters = append(req.ResponseParameters, &testpb.ResponseParameters{Size: s})
	}
	st, err := c.StreamingOutputCall(ctx, req)
	if err != nil {
		return err
	}
	for i, s := range sizes {
		m, err := st.Recv()
		if err != nil {
			return fmt.Errorf("message %d: %w", i, err)
		}
		if want := grpctest.Payload([]byte(tag), int(s)).Body; string(m.GetPayload().GetBody()) != string(want) {
			return fmt.Errorf("message %d: %d bytes %.20q…, want %d of %s", i, len(m.GetPayload().GetBody()), m.GetPayload().GetBody(), s, tag)
		}
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("end of stream: %v", err)
	}
	return nil
}

// checkGRPCSessions checks the recorded sessions of callFront: one per
// trace, proto grpc, the calls of its kind to the downstream at dst, every
// call tagged with the session's own tag, no retrace-* field anywhere.
func checkGRPCSessions(t *testing.T, sessions []*recording.Session, dst string) {
	t.Helper()
	if len(sessions) != grpcTraces {
		t.Errorf("%d sessions recorded, want %d", len(sessions), grpcTraces)
	}
	otherTag := regexp.MustCompile(`trace-\d{3}`)
	seen := map[string]bool{}
	for _, se := range sessions {
		if se.Inbound.Proto != http2.GRPCName {
			t.Errorf("session %s: inbound proto %q, want %q", se.ID, se.Inbound.Proto, http2.GRPCName)
			continue
		}
		path, tag, err := inboundTag(se.Inbound.Request)
		if err != nil {
			t.Errorf("session %s: inbound request: %v", se.ID, err)
			continue
		}
		if seen[tag] {
			t.Errorf("session %s: a second session of %s", se.ID, tag)
		}
		seen[tag] = true
		noRetraceFields(t, se.ID+" inbound request", se.Inbound.Request)
		noRetraceFields(t, se.ID+" inbound response", se.Inbound.Response)
		want := []string{streamPath}
		if path == unaryPath {
			want = exercisePaths
		}
		var got []string
		for _, c := range se.Calls {
			if c.Setup {
				continue
			}
			if c.Proto != http2.GRPCName || c.Dst != dst {
				t.Errorf("session %s (%s): a %s call to %s, want only grpc calls to %s", se.ID, tag, c.Proto, c.Dst, dst)
				continue
			}
			m, _, err := http2.ParseMessage(c.Request)
			if err != nil {
				t.Errorf("session %s (%s): call request: %v", se.ID, tag, err)
				continue
			}
			p, _ := http2.Get(m.Header, ":path")
			got = append(got, p)
			if x, _ := http2.Get(m.Header, "x-trace"); x != tag {
				t.Errorf("session %s (%s): its call %s carries x-trace %q", se.ID, tag, p, x)
			}
			for _, half := range [][]byte{c.Request, c.Response} {
				for _, other := range otherTag.FindAll(half, -1) {
					if string(other) != tag {
						t.Errorf("session %s (%s): its call %s holds bytes of %s", se.ID, tag, p, other)
						break
					}
				}
			}
			noRetraceFields(t, se.ID+" call "+p+" request", c.Request)
			noRetraceFields(t, se.ID+" call "+p+" response", c.Response)
		}
		slices.Sort(got)
		want = slices.Sorted(slices.Values(want))
		if !slices.Equal(got, want) {
			t.Errorf("session %s (%s %s): calls %v, want %v", se.ID, path, tag, got, want)
		}
	}
}

// inboundTag is the path of a recorded inbound gRPC request and the tag in
// its first message's payload.
func inboundTag(req []byte) (path, tag string, err error) {
	m, _, err := http2.ParseMessage(req)
	if err != nil {
		return "", "", err
	}
	path, _ = http2.Get(m.Header, ":path")
	msgs, _, err := grpcwire.Split(m.Data, 0)
	if err != nil || len(msgs) != 1 {
		return path, "", fmt.Errorf("%s: %d messages (%v), want 1", path, len(msgs), err)
	}
	var p interface{ GetPayload() *testpb.Payload }
	switch path {
	case unaryPath:
		r := &testpb.SimpleRequest{}
		err, p = proto.Unmarshal(msgs[0].Data, r), r
	case streamPath:
		r := &testpb.StreamingOutputCallRequest{}
		err, p = proto.Unmarshal(msgs[0].Data, r), r
	default:
		return path, "", fmt.Errorf("unexpected method %s", path)
	}
	if err != nil {
		return path, "", err
	}
	return path, string(p.GetPayload().GetBody()), nil
}

// noRetraceFields fails the test when a recorded half has a retrace-*
// field in a header block.
func noRetraceFields(t *testing.T, what string, half []byte) {
	t.Helper()
	m, _, err := http2.ParseMessage(half)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	blocks := append([][]hpack.HeaderField{m.Header, m.Trailer}, m.Interim...)
	for _, b := range blocks {
		for _, f := range b {
			if strings.HasPrefix(f.Name, "retrace-") {
				t.Errorf("%s: recorded field %s: %s", what, f.Name, f.Value)
			}
		}
	}
}

// startFront starts grpcfront with its downstream at down and the agent
// configured by env; it stops with the test.
func startFront(t *testing.T, dir, name, down string, env ...string) *demo.Service {
	t.Helper()
	log, err := os.Create(filepath.Join(dir, "grpcfront-"+name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	svc, err := demo.StartService(context.Background(), demo.ServiceSpec{
		Path: frontBinary(t), Args: []string{"-listen", "127.0.0.1:0", "-downstream", down}, ListeningPrefix: "grpcfront: listening on ",
		Env: append([]string{"RETRACE_MODE=", "RETRACE_LOG=error"}, env...), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop() })
	return svc
}

// mockProcess is `retrace mock` running as a user runs it.
type mockProcess struct {
	cmd         *exec.Cmd
	addr, admin string
	done        chan error
}

var mockListening = regexp.MustCompile(`retrace mock: listening on (\S+), admin API (\S+)`)

// startMockBinary runs `retrace mock` on the recordings in dir, on
// ephemeral ports, and waits until it listens; its output goes to logPath.
func startMockBinary(t *testing.T, retrace, dir, logPath string) *mockProcess {
	t.Helper()
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	m := &mockProcess{cmd: exec.Command(retrace, "mock", "--recordings", dir, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"),
		done: make(chan error, 1)}
	m.cmd.Env = append(os.Environ(), "RETRACE_MODE=")
	m.cmd.Stdout = log
	pr, err := m.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			fmt.Fprintln(log, sc.Text())
			if g := mockListening.FindStringSubmatch(sc.Text()); g != nil {
				found <- g
			}
		}
		m.done <- m.cmd.Wait()
	}()
	t.Cleanup(func() { m.stop(t) })
	select {
	case g := <-found:
		m.addr, m.admin = g[1], g[2]
		if !strings.HasPrefix(m.admin, "http") {
			m.admin = "http://" + m.admin
		}
	case err := <-m.done:
		m.done <- err
		t.Fatalf("retrace mock exited before listening: %v (log %s)", err, logPath)
	case <-time.After(30 * time.Second):
		t.Fatalf("retrace mock did not listen within 30s (log %s)", logPath)
	}
	return m
}

// stop ends the mock by SIGINT, as Ctrl-C does; safe to call twice.
func (m *mockProcess) stop(t *testing.T) {
	if m.cmd.ProcessState != nil {
		return
	}
	m.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-m.done:
		if err != nil {
			t.Errorf("retrace mock: %v", err)
		}
	case <-time.After(15 * time.Second):
		m.cmd.Process.Kill()
		<-m.done
		t.Errorf("retrace mock did not stop within 15s of SIGINT")
	}
}

// replayCLI runs `retrace replay` as the README does (no noise detection:
// grpc-go sends each call's remaining deadline as grpc-timeout, different
// on every run, and the downstream diff leaves it out) and returns the
// report's summary; its exit status is checked against the summary (0
// exactly when all passed).
func replayCLI(t *testing.T, retrace, recDir, target, mockAdmin, reportDir string, more ...string) *report.Summary {
	t.Helper()
	cmd := exec.Command(retrace, append([]string{"replay", "--recordings", recDir, "--target", target, "--mock-admin", mockAdmin,
		"--concurrency", "16", "--report", reportDir}, more...)...)
	cmd.Env = append(os.Environ(), "RETRACE_MODE=")
	out, err := cmd.CombinedOutput()
	var sum report.Summary
	if _, serr := os.Stat(filepath.Join(reportDir, report.SummaryFile)); serr != nil {
		t.Fatalf("retrace replay wrote no summary (%v): %v\n%s", serr, err, out)
	}
	readJSON(t, filepath.Join(reportDir, report.SummaryFile), &sum)
	allPassed := sum.Sessions > 0 && sum.Passed == sum.Sessions
	if (err == nil) != allPassed {
		t.Errorf("retrace replay: exit %v with %d of %d sessions passed\n%s", err, sum.Passed, sum.Sessions, out)
	}
	if !allPassed {
		t.Logf("retrace replay against %s:\n%s", target, cut(string(out), 3000))
	}
	return &sum
}

// runCLI runs a retrace command and fails the test unless it succeeds.
func runCLI(t *testing.T, retrace string, args ...string) {
	t.Helper()
	cmd := exec.Command(retrace, args...)
	cmd.Env = append(os.Environ(), "RETRACE_MODE=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("retrace %s: %v\n%s", strings.Join(args, " "), err, cut(string(out), 3000))
	}
}

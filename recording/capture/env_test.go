package capture_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/patches"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/recording/capture"
)

// childEnv marks the test binary re-executed as a service with the agent
// configured from the environment by package patches.
const childEnv = "CAPTURE_TEST_CHILD"

// runChild is the child's main: the "echo" downstream, the "fanout"
// service, or else a service that increments a Redis key per request.
func runChild() int {
	switch os.Getenv(childEnv) {
	case "echo":
		return runEcho()
	case "fanout":
		return runFanOut()
	case "pgfanout":
		return runPGFanOut()
	case "grpcload":
		return runGRPCLoad()
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(testenv.RedisEnv)})
	return serveChild(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := rdb.Incr(r.Context(), "capture-child:"+r.URL.Query().Get("id")).Result()
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		fmt.Fprintf(w, `{"n":%d,"token":"%s"}`, v, r.Header.Get("Authorization"))
	}), func() { rdb.Close() })
}

// runFanOut serves the fan-out service (see BenchmarkFanOutRatio). The
// downstream's URL and the table come in fanOutDownEnv and fanOutTableEnv (with
// no table it makes one of its own);
// with fanOutProfileEnv it writes a CPU profile there, and its allocation
// profile beside it (".allocs").
func runFanOut() int {
	table := os.Getenv(fanOutTableEnv)
	if table == "" { // a table of its own (scripts/count-record.sh)
		t, drop, err := tempTable(os.Getenv(testenv.MySQLEnv))
		if err != nil {
			fmt.Println(err)
			return 1
		}
		defer drop()
		table = t
	}
	svc, err := newFanOut(os.Getenv(testenv.RedisEnv), os.Getenv(testenv.MySQLEnv), os.Getenv(fanOutDownEnv), table)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	if path := os.Getenv(fanOutProfileEnv); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Println(err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Println(err)
			return 1
		}
		defer pprof.StopCPUProfile()
		defer writeAllocs(path + ".allocs")
	}
	return serveChild(svc, svc.close)
}

// writeAllocs writes the process's allocation profile (all allocations
// since it started, sampled as the runtime does) to path.
func writeAllocs(path string) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		fmt.Println(err)
	}
}

// serveChild serves h, with the agent as the environment configures it: it
// prints its address, serves until standard input closes, then closes the
// service's clients, stops the agent (which flushes the recorder) and
// returns the exit code.
func serveChild(h http.Handler, closeClients func()) int {
	if err := patches.Err(); err != nil {
		fmt.Println("agent off:", err)
		return 1
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	fmt.Println(ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = srv.Shutdown(context.Background())
	closeClients()
	if err := patches.Stop(context.Background()); err != nil {
		fmt.Println("stop:", err)
		return 1
	}
	return 0
}

// runEcho is the HTTP downstream of the fan-out service, in a process of
// its own (without the agent) like a real downstream: it answers
// "echo-<id>" until standard input closes.
func runEcho() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "echo-"+r.URL.Query().Get("id"))
	})}
	if cert := os.Getenv(echoCertEnv); cert != "" {
		// HTTPS (BenchmarkFanOutRatio with CAPTURE_BENCH_TLS)
		go func() { _ = srv.ServeTLS(ln, cert, os.Getenv(echoKeyEnv)) }()
	} else {
		go func() { _ = srv.Serve(ln) }()
	}
	fmt.Println(ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = srv.Close()
	return 0
}

// startChild runs the test binary as a child of the kind ("echo" or
// "service") with extra environment, and returns the address it printed
// and the function that ends it (closing its standard input) and returns
// the rest of its output.
func startChild(tb testing.TB, kind string, env ...string) (addr string, stop func() string) {
	tb.Helper()
	addr, stop, _ = startChildCmd(tb, kind, env...)
	return addr, stop
}

// startChildCmd is startChild, also returning the child's command (its
// ProcessState is set once stop has returned).
func startChildCmd(tb testing.TB, kind string, env ...string) (addr string, stop func() string, cmd *exec.Cmd) {
	tb.Helper()
	cmd = testenv.SelfCommand("-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+kind), env...)
	stdin, err := cmd.StdinPipe()
	require.NoError(tb, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(tb, err)
	cmd.Stderr = os.Stderr
	require.NoError(tb, cmd.Start())
	br := bufio.NewReader(stdout)
	line, err := br.ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		tb.Fatalf("child %s: %v", kind, err)
	}
	addr = strings.TrimSpace(line)
	var once sync.Once
	var rest string
	stop = func() string {
		once.Do(func() {
			_ = stdin.Close()
			b, _ := io.ReadAll(br)
			rest = string(b)
			if err := cmd.Wait(); err != nil {
				tb.Errorf("child %s: %v: %s", kind, err, b)
			}
		})
		return rest
	}
	tb.Cleanup(func() { stop() })
	require.NotContains(tb, addr, " ", "child %s: %s", kind, addr)
	return addr, stop, cmd
}

func TestRecordModeFromEnvironment(t *testing.T) {
	redisAddr := testenv.RedisAddr(t)
	dir := t.TempDir()
	rules := filepath.Join(dir, "mask.txt")
	require.NoError(t, os.WriteFile(rules, []byte("header Authorization\nregex \"token\":\"[^\"]*\" \"token\":\"***\"\n"), 0o644))
	rec := filepath.Join(dir, "rec")

	addr, stop := startChild(t, "service", "RETRACE_MODE=record", "RETRACE_APP=child",
		"RETRACE_RECORD=file://"+rec, "RETRACE_SAMPLE=1", "RETRACE_MASK="+rules, testenv.RedisEnv+"="+redisAddr)

	c := &http.Client{Transport: &http.Transport{}}
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for i := range 5 {
		req, err := http.NewRequest("GET", fmt.Sprintf("http://%s/?id=%d", addr, i), nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer secret-token")
		if i == 0 {
			req.Header.Set("traceparent", tp)
		}
		resp, err := c.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Contains(t, string(body), "secret-token", "the service itself sees the real header")
	}
	c.CloseIdleConnections()
	stop()

	st, err := recording.Open(context.Background(), rec)
	require.NoError(t, err)
	var got []*recording.Session
	require.NoError(t, st.Scan(context.Background(), func(s *recording.Session) error {
		got = append(got, s)
		return nil
	}))
	require.Len(t, got, 5, "every request recorded and flushed at patches.Stop")
	ids, traces := map[string]bool{}, map[string]int{}
	for _, s := range got {
		ids[s.ID] = true
		traces[s.Trace]++
		assert.Equal(t, "child", s.App)
		assert.Contains(t, string(s.Inbound.Request), "Authorization: ***\r\n")
		assert.NotContains(t, string(s.Inbound.Request)+string(s.Inbound.Response), "secret-token")
		var redisCalls int
		for _, call := range s.Calls {
			if call.Proto == "redis" && !call.Setup {
				redisCalls++
				assert.Contains(t, string(call.Request), "incr")
			}
		}
		assert.Equal(t, 1, redisCalls, "session %s: %+v", s.ID, s.Calls)
	}
	assert.Len(t, ids, 5, "an id per request")
	assert.Equal(t, map[string]int{"4bf92f3577b34da6a3ce929d0e0e4736": 1, "": 4}, traces, "the traceparent's trace id is the session's Trace")
}

func TestFromEnvErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	badRules := filepath.Join(dir, "bad-rules")
	require.NoError(t, os.WriteFile(badRules, []byte("header Authorization\nredact everything\n"), 0o644))
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"bad sample", map[string]string{capture.EnvSample: "lots"}, "RETRACE_SAMPLE"},
		{"sample out of range", map[string]string{capture.EnvSample: "2"}, "RETRACE_SAMPLE"},
		{"missing mask file", map[string]string{capture.EnvMask: filepath.Join(dir, "nope")}, "RETRACE_MASK"},
		{"bad mask rule", map[string]string{capture.EnvMask: badRules}, "bad-rules:2: unknown rule \"redact\""},
		{"record into a file", map[string]string{capture.EnvRecord: filepath.Join(file, "sub")}, "RETRACE_RECORD"},
		{"unknown scheme", map[string]string{capture.EnvRecord: "ftp://x"}, "RETRACE_RECORD"},
		{"redis store not linked", map[string]string{capture.EnvRecord: "redis://127.0.0.1:6379/0"}, `add import _ "github.com/retrace-dev/retrace/recording/redisstore"`},
		{"bad buffer", map[string]string{capture.EnvBuffer: "lots"}, "RETRACE_BUFFER"},
		{"zero buffer", map[string]string{capture.EnvBuffer: "0"}, "RETRACE_BUFFER"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string {
				if v, ok := tc.env[k]; ok {
					return v
				}
				if k == capture.EnvRecord {
					return dir
				}
				return ""
			}
			_, _, err := capture.FromEnv(getenv, nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, stop, err := capture.FromEnv(func(k string) string {
		if k == capture.EnvRecord {
			return filepath.Join(dir, "new")
		}
		return ""
	}, nil)
	require.NoError(t, err)
	assert.DirExists(t, filepath.Join(dir, "new"), "the directory is made at start")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, stop(ctx))
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"33554432": 32 << 20, "64MB": 64e6, "32MiB": 32 << 20, " 1 gib ": 1 << 30, "512k": 512 << 10, "10B": 10} {
		got, err := capture.ParseBytes(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "MB", "-1", "1.5MB", "3 parsecs", "99999999999999999999"} {
		_, err := capture.ParseBytes(bad)
		assert.Error(t, err, bad)
	}
}

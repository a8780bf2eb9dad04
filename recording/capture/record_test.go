package capture_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/retrace-dev/retrace/internal/certtest"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/recording"
)

func sampler(tb testing.TB, rate float64) *recording.Sampler {
	s, err := recording.NewSampler(rate)
	require.NoError(tb, err)
	return &s
}

// TestRecordFanOut drives 64 concurrent clients through the fan-out service
// and checks that every recorded session has exactly its own calls: every
// downstream payload carries its request's id, so a call holding another
// request's id, or a session missing one of its calls, shows at once.
func TestRecordFanOut(t *testing.T) {
	w := startWorld(t, sampler(t, 1))
	const clients, rounds = 64, 3
	c := newClient(clients)
	defer c.CloseIdleConnections()
	ids := make(map[string]bool)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, clients*rounds)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				id := newReqID()
				mu.Lock()
				ids[id] = true
				mu.Unlock()
				if err := get(c, w.addr, id); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	settle(t, w.rec)

	sessions := checkSessions(t, w.store, w.addr, ids)
	require.Len(t, sessions, len(ids), "one session per request")
	st := w.rec.Stats()
	assert.Zero(t, st.Dropped)
	assert.Zero(t, st.Overflow)
	assert.Zero(t, st.Incomplete)
}

// checkSessions reads the sessions of the service at addr from st and
// checks each (checkSession): its request is one of ids, recorded once,
// and every connection's set-up calls are kept with one session. It
// returns them by request id.
func checkSessions(t *testing.T, st recording.Store, addr string, ids map[string]bool) map[string]*recording.Session {
	t.Helper()
	sessions := map[string]*recording.Session{}
	require.NoError(t, st.Scan(context.Background(), func(s *recording.Session) error {
		if s.Inbound.Local != addr {
			return nil // not the service (the test client is not recorded; kept as a guard)
		}
		id := idPattern.FindString(string(s.Inbound.Request))
		require.NotEmpty(t, id, "session %s: no request id in %q", s.ID, s.Inbound.Request)
		require.Nil(t, sessions[id], "request %s recorded twice", id)
		sessions[id] = s
		return nil
	}))
	setups := map[string]int{} // per connection: sessions holding its set-up calls
	for id, s := range sessions {
		require.True(t, ids[id], "session of a request never sent: %s", id)
		checkSession(t, id, s)
		seen := map[string]bool{}
		for _, call := range s.Calls {
			if call.Setup {
				k := fmt.Sprintf("%s#%d", call.Dst, call.Conn)
				if !seen[k] {
					seen[k] = true
					setups[k]++
				}
			}
		}
	}
	for k, n := range setups {
		assert.Equal(t, 1, n, "set-up calls of connection %s are kept with one session", k)
	}
	return sessions
}

// TestRecordFanOutSampled runs the fan-out service configured from the
// environment as in production (RETRACE_MODE=record, RETRACE_SAMPLE=0.2)
// under 32 concurrent clients: the sampled requests share every pooled
// connection with unsampled ones, whose traffic the agent no longer reports
// past a connection's set-up, and each recorded session still holds
// exactly its own calls.
func TestRecordFanOutSampled(t *testing.T) {
	redisAddr, dsn := testenv.RedisAddr(t), testenv.MySQLDSN(t)
	down, _ := startChild(t, "echo")
	dir := t.TempDir()
	addr, stop := startChild(t, "fanout", testenv.RedisEnv+"="+redisAddr, testenv.MySQLEnv+"="+dsn,
		fanOutDownEnv+"=http://"+down, fanOutTableEnv+"="+createTable(t, dsn),
		"RETRACE_MODE=record", "RETRACE_APP=fanout", "RETRACE_RECORD=file://"+dir, "RETRACE_SAMPLE=0.2")
	const clients, rounds = 32, 10
	c := newClient(clients)
	var mu sync.Mutex
	ids := map[string]bool{}
	var g errgroup.Group
	for range clients {
		g.Go(func() error {
			for range rounds {
				id := newReqID()
				mu.Lock()
				ids[id] = true
				mu.Unlock()
				if err := get(c, addr, id); err != nil {
					return err
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	c.CloseIdleConnections()
	require.Empty(t, strings.TrimSpace(stop()), "the service's output") // flushes the recorder

	st, err := recording.Open(context.Background(), dir)
	require.NoError(t, err)
	defer st.Close()
	sessions := checkSessions(t, st, addr, ids)
	// 320 requests at 20%: 64 expected; far outside [20, 130] means the
	// sampling is not per request
	assert.Greater(t, len(sessions), 20)
	assert.Less(t, len(sessions), 130)
	t.Logf("%d of %d requests recorded", len(sessions), len(ids))
}

// checkSession asserts that s, the session of request id, holds the
// service's calls for id and nothing of another request.
func checkSession(t *testing.T, id string, s *recording.Session) {
	t.Helper()
	assert.Contains(t, string(s.Inbound.Response), `"Redis":"`+id+`"`)
	assert.Equal(t, "fanout", s.App)
	var got []string
	for i, c := range s.Calls {
		assert.Equal(t, i, c.Seq)
		if i > 0 {
			assert.LessOrEqual(t, s.Calls[i-1].StartNs, c.StartNs, "calls in start order")
		}
		for _, other := range idPattern.FindAllString(string(c.Request)+string(c.Response), -1) {
			if other != id {
				for j, c := range s.Calls {
					t.Logf("call %d conn %d start %d dur %d %s %q → %q", j, c.Conn, c.StartNs, c.DurNs, c.Proto, c.Request, c.Response)
				}
			}
			require.Equal(t, id, other, "session %s (request %s) holds a call of request %s: %q", s.ID, id, other, c.Request)
		}
		mine := bytes.Contains(c.Request, []byte(id))
		switch {
		case c.Setup:
			got = append(got, c.Proto+" setup")
		case c.Proto == "redis" && mine && bytes.Contains(c.Request, []byte("set")) && bytes.Contains(c.Response, []byte(id)):
			got = append(got, "redis pipeline")
		case c.Proto == "redis" && mine && bytes.Contains(c.Request, []byte("strlen")):
			got = append(got, "redis strlen")
		case c.Proto == "mysql" && mine && bytes.Contains(c.Request, []byte("INSERT")):
			got = append(got, "mysql insert")
		case c.Proto == "mysql" && mine && bytes.Contains(c.Request, []byte("SELECT")):
			got = append(got, "mysql select")
		case c.Proto == "mysql" && mine && bytes.Contains(c.Response, []byte("v-"+id)):
			got = append(got, "mysql row")
		case c.Proto == "mysql" && mine:
			got = append(got, "mysql execute")
		case c.Proto == "mysql" && isStmtClose(c.Request):
			got = append(got, "mysql close")
		case c.Proto == "http" && mine && bytes.Contains(c.Response, []byte("echo-"+id)):
			got = append(got, "http echo")
		default:
			t.Errorf("session of %s: unexpected call %d %s %q → %q", id, i, c.Proto, c.Request, c.Response)
		}
	}
	for _, want := range []string{"redis pipeline", "redis strlen", "mysql insert", "mysql select", "mysql row", "http echo"} {
		assert.Contains(t, got, want, "session of %s: calls %s", id, strings.Join(got, ", "))
	}
}

// isStmtClose reports a MySQL request made only of COM_STMT_CLOSE packets,
// which carry a statement id and nothing of the request.
func isStmtClose(req []byte) bool {
	n := 0
	for len(req) >= 5 {
		l := int(req[0]) | int(req[1])<<8 | int(req[2])<<16
		if req[4] != 0x19 || len(req) < 4+l {
			return false
		}
		req, n = req[4+l:], n+1
	}
	return n > 0 && len(req) == 0
}

// BenchmarkFanOut measures the service's throughput with the agent off and
// recording at 100% and 1%, in one run:
//
//	go test -run x -bench FanOut -benchtime 2000x ./recording/capture/
//
// The throughput ratio of a mode is ns/op(off) / ns/op(mode).
func BenchmarkFanOut(b *testing.B) {
	for _, mode := range []struct {
		name string
		rate float64
	}{{"off", -1}, {"record=100%", 1}, {"record=1%", 0.01}} {
		b.Run(mode.name, func(b *testing.B) {
			w, c := startMode(b, mode.rate)
			var n atomic.Int64
			for range 200 { // warm the pools, the table and the store
				if err := get(c, w.addr, fmt.Sprintf("rq%016x", n.Add(1))); err != nil {
					b.Fatal(err)
				}
			}
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := get(c, w.addr, fmt.Sprintf("rq%016x", n.Add(1))); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			if w.rec != nil {
				settle(b, w.rec)
				st := w.rec.Stats()
				b.ReportMetric(float64(st.Recorded), "sessions")
				b.ReportMetric(float64(st.Dropped), "dropped")
			}
		})
	}
}

// A "fanout" child (see runFanOut) takes its HTTP downstream's URL and its
// table from these.
const (
	fanOutDownEnv    = "CAPTURE_TEST_DOWN"
	fanOutCAEnv      = "CAPTURE_TEST_DOWN_CA" // PEM of the CA of an HTTPS downstream
	echoCertEnv      = "CAPTURE_TEST_ECHO_CERT"
	echoKeyEnv       = "CAPTURE_TEST_ECHO_KEY"
	fanOutTableEnv   = "CAPTURE_TEST_TABLE"
	fanOutProfileEnv = "CAPTURE_TEST_CPUPROFILE"
)

// BenchmarkFanOutRatio measures the throughput ratios of recording at 100%
// and 1% against the agent off. Each mode's service runs in a process of
// its own, with the agent configured from the environment by package
// patches as in production, so the three run side by side and the
// benchmark alternates between them quickly: each round sends a slice of
// requests to every mode in turn, in an order that rotates from round to
// round (each mode takes each place equally often). Drift of a shared
// machine, which on a small VM is larger than the effect measured, then
// falls on all modes alike. Two processes of the same build also differ
// (by a few percent here, for as long as they run), so the run is made of
// blocks, each with three new processes, started (and warmed up) in an
// order that rotates from block to block too: with the agent off in all
// three (CAPTURE_BENCH_AA), the process started first was 1–3% slower than
// the other two over ten runs when it was always the agent-off one.
//
// A mode's throughput is its requests over the time its slices took; the
// ratio of a mode is its throughput over the agent-off one, for the whole
// run (ratio-100%, ratio-1%) and per block (the median, lowest and highest
// of those show the spread). cpu-ratio compares the CPU time of the
// services' processes alone, from the end of warm-up to their exit (the
// recorder's last writes included), per request. Run it once:
//
//	go test -run x -bench FanOutRatio -benchtime 1x ./recording/capture/
//
// CAPTURE_BENCH_BLOCKS and CAPTURE_BENCH_ROUNDS change the number of blocks
// (6) and of rounds in each (6); multiples of 3 give each mode each place
// equally often. With CAPTURE_BENCH_AA=1 in the environment all three
// services run with the agent off, which shows the noise floor of the
// machine. With CAPTURE_BENCH_PROFILES=DIR each service writes a CPU
// profile into DIR, named after its mode and block, and its allocation
// profile beside it (MODE-BLOCK.prof.allocs).
func BenchmarkFanOutRatio(b *testing.B) {
	const slice, clients = 400, 8
	blocks, rounds := envInt(b, "CAPTURE_BENCH_BLOCKS", 6), envInt(b, "CAPTURE_BENCH_ROUNDS", 6)
	// CAPTURE_BENCH_SERVICE=postgres measures the pgx fan-out service
	// (three queries at once on a pgx pool) instead
	pg := os.Getenv("CAPTURE_BENCH_SERVICE") == "postgres"
	kind, check := "fanout", get
	var redisAddr, dsn, pgURL, down string
	// CAPTURE_BENCH_TLS=1: the HTTP downstream is HTTPS, behind a CA of
	// the benchmark's own
	scheme, tlsEnv, echoEnv := "http", []string(nil), []string(nil)
	if pg {
		kind, check, pgURL = "pgfanout", pgGet, testenv.PostgresURL(b)
	} else {
		redisAddr, dsn = testenv.RedisAddr(b), testenv.MySQLDSN(b)
		if os.Getenv("CAPTURE_BENCH_TLS") != "" {
			ca := certtest.New(b)
			dir := b.TempDir()
			caFile, err := ca.WritePEM(dir)
			require.NoError(b, err)
			cert, key, err := ca.WriteLeaf(dir, "127.0.0.1")
			require.NoError(b, err)
			scheme, tlsEnv, echoEnv = "https", []string{fanOutCAEnv + "=" + caFile}, []string{echoCertEnv + "=" + cert, echoKeyEnv + "=" + key}
		}
		down, _ = startChild(b, "echo", echoEnv...)
	}
	aa := os.Getenv("CAPTURE_BENCH_AA") != ""
	profiles := os.Getenv("CAPTURE_BENCH_PROFILES")
	type mode struct {
		name, rate string
		dirs       []string
		wall, cpu  time.Duration
		sys        time.Duration // the part of cpu spent in the kernel
		perBlock   []time.Duration
		io         [2]int64 // read and write system calls
	}
	modes := []*mode{{name: "off"}, {name: "100%", rate: "1"}, {name: "1%", rate: "0.01"}}
	// service is one mode's process in a block
	type service struct {
		*mode
		addr string
		stop func() string
		cmd  *exec.Cmd
		c    *http.Client
		cpu0 time.Duration
		sys0 time.Duration
		io0  [2]int64
		wall time.Duration
	}
	send := func(s *service, total int) time.Duration {
		var n atomic.Int64
		start := time.Now()
		var wg sync.WaitGroup
		for range clients {
			wg.Go(func() {
				for n.Add(1) <= int64(total) {
					if err := check(s.c, s.addr, newReqID()); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	b.ResetTimer()
	for blk := range blocks {
		b.StopTimer()
		table := ""
		if !pg {
			table = createTable(b, dsn) // per block: MEMORY tables are bounded
		}
		var svcs []*service
		for i := range modes {
			// each mode starts (and warms up) first in some blocks: the
			// first process of a block may run differently all along
			m := modes[(blk+i)%len(modes)]
			env := []string{testenv.RedisEnv + "=" + redisAddr, testenv.MySQLEnv + "=" + dsn,
				fanOutDownEnv + "=" + scheme + "://" + down, fanOutTableEnv + "=" + table}
			env = append(env, tlsEnv...)
			if pg {
				env = []string{testenv.PostgresEnv + "=" + pgURL}
			}
			if m.rate != "" && !aa {
				dir := b.TempDir()
				m.dirs = append(m.dirs, dir)
				env = append(env, "RETRACE_MODE=record", "RETRACE_RECORD=file://"+dir, "RETRACE_SAMPLE="+m.rate)
			}
			if profiles != "" {
				name := fmt.Sprintf("%s-%d.prof", strings.TrimSuffix(m.name, "%"), blk)
				env = append(env, fanOutProfileEnv+"="+filepath.Join(profiles, name))
			}
			s := &service{mode: m, c: newClient(2 * clients)}
			s.addr, s.stop, s.cmd = startChildCmd(b, kind, env...)
			svcs = append(svcs, s)
		}
		for _, s := range svcs {
			send(s, 300) // warm the pools, the table and the store
			s.cpu0, s.sys0 = childCPU(b, s.cmd.Process.Pid)
			s.io0 = childIO(b, s.cmd.Process.Pid)
		}
		b.StartTimer()
		for r := range rounds {
			for k := range svcs {
				s := svcs[(blk+r+k)%len(svcs)]
				s.wall += send(s, slice)
			}
		}
		b.StopTimer()
		for _, s := range svcs {
			io := childIO(b, s.cmd.Process.Pid)
			s.mode.io[0] += io[0] - s.io0[0]
			s.mode.io[1] += io[1] - s.io0[1]
			s.c.CloseIdleConnections()
			if out := s.stop(); strings.TrimSpace(out) != "" {
				b.Fatalf("service %s: %s", s.name, out)
			}
			st := s.cmd.ProcessState
			s.mode.cpu += st.UserTime() + st.SystemTime() - s.cpu0
			s.mode.sys += st.SystemTime() - s.sys0
			s.mode.wall += s.wall
			s.perBlock = append(s.perBlock, s.wall)
		}
		b.StartTimer()
	}
	b.StopTimer()
	n := float64(blocks * rounds * slice)
	off := modes[0]
	for _, m := range modes {
		b.ReportMetric(n/m.wall.Seconds(), m.name+"-req/s")
		b.ReportMetric(float64(m.cpu.Microseconds())/n, m.name+"-cpu-µs/req")
		b.ReportMetric(float64(m.sys.Microseconds())/n, m.name+"-sys-µs/req")
		b.ReportMetric(float64(m.io[0])/n, m.name+"-reads/req")
		b.ReportMetric(float64(m.io[1])/n, m.name+"-writes/req")
	}
	for _, m := range modes[1:] {
		var per []float64
		for blk := range blocks {
			per = append(per, off.perBlock[blk].Seconds()/m.perBlock[blk].Seconds())
		}
		b.ReportMetric(off.wall.Seconds()/m.wall.Seconds(), "ratio-"+m.name)
		b.ReportMetric(median(per), "ratio-"+m.name+"-median")
		b.ReportMetric(slices.Min(per), "ratio-"+m.name+"-min")
		b.ReportMetric(slices.Max(per), "ratio-"+m.name+"-max")
		b.ReportMetric(off.cpu.Seconds()/m.cpu.Seconds(), "cpu-ratio-"+m.name)
		if aa {
			continue
		}
		sessions := 0
		for _, dir := range m.dirs {
			sessions += countSessions(b, dir)
		}
		b.ReportMetric(float64(sessions), "sessions-"+m.name)
		if m.rate == "1" && sessions < int(n) {
			b.Errorf("recording at 100%%: %d sessions for more than %d requests", sessions, int(n))
		}
	}
}

// childCPU returns the CPU time process pid has used, user and system
// together and system alone, from /proc (in clock ticks of 10 ms).
func childCPU(tb testing.TB, pid int) (cpu, sys time.Duration) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(tb, err)
	// the command name, in parentheses, may hold spaces: fields count
	// from the last ')'
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	require.NoError(tb, errors.Join(err1, err2))
	return time.Duration(utime+stime) * 10 * time.Millisecond, time.Duration(stime) * 10 * time.Millisecond
}

// childIO returns the read and write system calls process pid has made,
// from /proc.
func childIO(tb testing.TB, pid int) (n [2]int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	require.NoError(tb, err)
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ": ")
		switch k {
		case "syscr":
			n[0], err = strconv.ParseInt(v, 10, 64)
		case "syscw":
			n[1], err = strconv.ParseInt(v, 10, 64)
		}
		require.NoError(tb, err)
	}
	return n
}

// countSessions returns the number of sessions recorded in dir.
func countSessions(tb testing.TB, dir string) int {
	st, err := recording.Open(context.Background(), dir)
	require.NoError(tb, err)
	defer st.Close()
	n := 0
	require.NoError(tb, st.Scan(context.Background(), func(*recording.Session) error {
		n++
		return nil
	}))
	return n
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// startMode starts the fan-out world with the agent off (rate < 0) or
// recording at rate, and a client of 16 connections closed at the end.
func startMode(b *testing.B, rate float64) (*world, *http.Client) {
	var smp *recording.Sampler
	if rate >= 0 {
		smp = sampler(b, rate)
	}
	w := startWorld(b, smp)
	c := newClient(16)
	b.Cleanup(c.CloseIdleConnections)
	return w, c
}

// envInt is the positive integer in the environment variable name, or def.
func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

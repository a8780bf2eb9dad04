package capture_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

	sessions := map[string]*recording.Session{}
	require.NoError(t, w.store.Scan(context.Background(), func(s *recording.Session) error {
		if s.Inbound.Local != w.addr {
			return nil // not the service (the test client is not recorded; kept as a guard)
		}
		id := idPattern.FindString(string(s.Inbound.Request))
		require.NotEmpty(t, id, "session %s: no request id in %q", s.ID, s.Inbound.Request)
		require.Nil(t, sessions[id], "request %s recorded twice", id)
		sessions[id] = s
		return nil
	}))
	require.Len(t, sessions, len(ids), "one session per request")

	setups := map[string]int{} // per connection: sessions holding its set-up calls
	for id, s := range sessions {
		require.True(t, ids[id])
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
	st := w.rec.Stats()
	assert.Zero(t, st.Dropped)
	assert.Zero(t, st.Overflow)
	assert.Zero(t, st.Incomplete)
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

// BenchmarkFanOutRatio measures the throughput ratios of recording at 100%
// and 1% against the agent off on a shared, noisy machine. Each round runs
// the three modes back to back (in an order that rotates from round to
// round, so drift over the run favours no mode), each timing the same
// number of requests; a mode's ratio in a round is the off time over its
// time in that round, and the summary reports the median over the rounds
// (and the lowest and highest, to show the spread), for throughput and for
// the process's CPU time per request. Run it once:
//
//	go test -run x -bench FanOutRatio -benchtime 1x ./recording/capture/
func BenchmarkFanOutRatio(b *testing.B) {
	const rounds, requests = 7, 3000
	modes := []struct {
		name string
		rate float64
	}{{"off", -1}, {"record=100%", 1}, {"record=1%", 0.01}}
	type result struct{ wall, cpu time.Duration }
	results := make([]map[string]result, rounds)
	for r := range rounds {
		results[r] = map[string]result{}
		for k := range modes {
			mode := modes[(r+k)%len(modes)]
			b.Run(fmt.Sprintf("round=%d/%s", r, mode.name), func(b *testing.B) {
				w, c := startMode(b, mode.rate)
				var n atomic.Int64
				send := func(total int) time.Duration {
					start := time.Now()
					var wg sync.WaitGroup
					for range 8 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for n.Add(1) <= int64(total) {
								if err := get(c, w.addr, newReqID()); err != nil {
									b.Error(err)
									return
								}
							}
						}()
					}
					wg.Wait()
					return time.Since(start)
				}
				send(300) // warm the pools, the table and the store
				n.Store(0)
				cpu0 := processCPU(b)
				d := send(requests)
				if w.rec != nil {
					settle(b, w.rec) // the background writer's work is part of the cost
				}
				cpu := processCPU(b) - cpu0
				results[r][mode.name] = result{d, cpu}
				b.ReportMetric(float64(requests)/d.Seconds(), "req/s")
				b.ReportMetric(float64(cpu.Microseconds())/requests, "cpu-µs/req")
			})
		}
	}
	b.Run("summary", func(b *testing.B) {
		var offRate []float64
		for _, res := range results {
			offRate = append(offRate, requests/res["off"].wall.Seconds())
		}
		b.ReportMetric(median(offRate), "off-req/s")
		for _, mode := range modes[1:] {
			var wall, cpu []float64
			for _, res := range results {
				wall = append(wall, res["off"].wall.Seconds()/res[mode.name].wall.Seconds())
				cpu = append(cpu, res["off"].cpu.Seconds()/res[mode.name].cpu.Seconds())
			}
			pct := strings.TrimPrefix(mode.name, "record=")
			b.ReportMetric(median(wall), "ratio-"+pct)
			b.ReportMetric(slices.Min(wall), "ratio-"+pct+"-min")
			b.ReportMetric(slices.Max(wall), "ratio-"+pct+"-max")
			b.ReportMetric(median(cpu), "cpu-ratio-"+pct)
		}
	})
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

// processCPU returns the user and system CPU time this process has used
// (the client side of the test included: it is the same in every mode).
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package hook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/agenttest"
	"github.com/retrace-dev/retrace/internal/testenv"
)

// fanOut is the service under test with its real downstreams.
type fanOut struct {
	line      *agenttest.LineServer
	echo      *httptest.Server
	redisAddr string
	sutLn     net.Listener
}

func newFanOut(t *testing.T) *fanOut {
	f := &fanOut{
		redisAddr: testenv.RedisAddr(t),
		line:      agenttest.NewLineServer(t),
		echo:      httptest.NewServer(agenttest.EchoHandler()),
	}
	t.Cleanup(f.echo.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f.sutLn = ln
	return f
}

// serve starts the service on f.sutLn (after the hooks are installed) and
// returns its address; everything is closed at the end of the test, before
// the hooks are removed (cleanups run last-in first-out).
func (f *fanOut) serve(t *testing.T) string { return f.serveWith(t, nil) }

// serveWith is serve with the service's handler wrapped by wrap (nil: none).
func (f *fanOut) serveWith(t *testing.T, wrap func(http.Handler) http.Handler) string {
	svc := &agenttest.Service{
		Line:    &agenttest.LinePool{Addr: f.line.Addr},
		Redis:   redis.NewClient(&redis.Options{Addr: f.redisAddr, PoolSize: 8, DisableIdentity: true}),
		HTTP:    &http.Client{Transport: &http.Transport{MaxConnsPerHost: 4, MaxIdleConnsPerHost: 4}},
		EchoURL: f.echo.URL,
	}
	var h http.Handler = svc
	if wrap != nil {
		h = wrap(svc)
	}
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(f.sutLn)
	}()
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		<-done
		svc.Line.Close()
		svc.Redis.Close()
		svc.HTTP.CloseIdleConnections()
	})
	return f.sutLn.Addr().String()
}

func install(t *testing.T, cfg hook.Config) {
	t.Helper()
	undo, err := hook.Install(cfg)
	require.NoError(t, err)
	t.Cleanup(undo)
}

// drive sends rounds × clients requests, each client on its own keep-alive
// connection, each request with a fresh trace id, and checks every answer.
// header adds the Retrace-Trace-Id header (replay).
func drive(t *testing.T, addr string, clients, rounds int, header bool) {
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc, err := agenttest.DialRaw(addr)
			if err != nil {
				errs <- err
				return
			}
			defer rc.Close()
			for r := 0; r < rounds; r++ {
				id := agenttest.NewID()
				var hdr []string
				if header {
					hdr = append(hdr, hook.TraceHeader+": "+id)
				}
				code, body, err := rc.Get("/work/"+id, hdr...)
				if err == nil {
					err = checkResult(id, code, body, header)
				}
				if err != nil {
					errs <- fmt.Errorf("client %d round %d: %w", c, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func checkResult(id string, code int, body []byte, traced bool) error {
	var res agenttest.Result
	if err := json.Unmarshal(body, &res); err != nil {
		return fmt.Errorf("status %d, body %q: %w", code, body, err)
	}
	if code != http.StatusOK || len(res.Errors) > 0 {
		return fmt.Errorf("status %d, errors %v", code, res.Errors)
	}
	if res.ID != id || res.Line != id || res.Redis != id || res.Echo.Path != "/echo/"+id {
		return fmt.Errorf("answers mixed up: %+v", res)
	}
	if len(res.Retrace) > 0 {
		return fmt.Errorf("the application saw %v", res.Retrace)
	}
	for k := range res.Echo.Headers {
		if strings.HasPrefix(strings.ToLower(k), "retrace-") {
			return fmt.Errorf("the HTTP downstream received %s", k)
		}
	}
	want := ""
	if traced {
		want = id
	}
	for _, where := range []string{"handler", "go", "errgroup", "grandchild"} {
		if got, ok := res.Seen[where]; !ok || got != want {
			return fmt.Errorf("trace in %s goroutine = %q, want %q (seen %v)", where, got, want, res.Seen)
		}
	}
	return nil
}

// TestReplayFanOut is the main scenario: 64 concurrent replayed
// requests, each with its own trace, repeated, fanning out with go,
// errgroup and a grandchild to a raw TCP protocol, Redis (go-redis) and an
// HTTP downstream (one shared keep-alive client). Every outbound connection
// goes to the mock, which checks every frame's trace: zero misattributions.
func TestReplayFanOut(t *testing.T) {
	f := newFanOut(t)
	echoAddr := f.echo.Listener.Addr().String()
	mock := agenttest.NewMock(t, map[string]agenttest.Proto{
		f.line.Addr: agenttest.ProtoLine,
		f.redisAddr: agenttest.ProtoRESP,
		echoAddr:    agenttest.ProtoHTTP,
	})
	before := hook.ReadStats()
	install(t, hook.Config{Mode: hook.Replay, MockAddr: mock.Addr, Passthrough: []string{f.sutLn.Addr().String()}})
	addr := f.serve(t)

	const clients, rounds = 64, 4
	drive(t, addr, clients, rounds, true)

	ms := mock.Stats()
	require.Empty(t, ms.Misattributed, "frames charged to the wrong trace")
	require.Empty(t, ms.Leaks, "Retrace-* headers reached the HTTP downstream")
	require.Empty(t, ms.Errors)
	// line + SET + GET + HTTP per request, at least.
	require.GreaterOrEqual(t, ms.Tagged, clients*rounds*4)
	require.Equal(t, ms.Conns, ms.Preambles)
	st := hook.ReadStats()
	require.GreaterOrEqual(t, st.Traced-before.Traced, int64(clients*rounds))
	require.GreaterOrEqual(t, st.CarriedRequests-before.CarriedRequests, int64(clients*rounds))
	require.Equal(t, int64(ms.Conns), st.RedirectedConnects-before.RedirectedConnects)
	require.Zero(t, st.Failures-before.Failures)
	t.Logf("mock: %d conns, %d frames (%d naming a trace, %d untraced); agent: %+v",
		ms.Conns, ms.Frames, ms.Tagged, ms.Untraced, st)
}

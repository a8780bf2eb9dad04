package hook_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/agenttest"
	"github.com/retrace-dev/retrace/trace"
)

// A client pipelines requests on one keep-alive connection to net/http: it
// sends the next ones before the answer to the first. Each request's
// handler must run under its own trace — its downstream calls (line
// protocol, Redis, HTTP; every payload names the request's id) framed with
// that trace in replay mode, reported with it in record mode — however the
// requests' bytes arrive: all in one read, or the second head cut over
// reads, the rest coming before, during or after the first request's
// handler.

// pipeReq is one request of a pipelined scenario.
type pipeReq struct {
	method, id, body string
	expect           bool // Expect: 100-continue
}

// head is the request line and header block; full adds the body.
func (r pipeReq) head() string {
	s := r.method + " /work/" + r.id + " HTTP/1.1\r\nHost: sut\r\n" +
		hook.TraceHeader + ": " + r.id + "\r\nAccept: */*\r\n"
	if r.body != "" {
		s += "Content-Length: " + strconv.Itoa(len(r.body)) + "\r\n"
	}
	if r.expect {
		s += "Expect: 100-continue\r\n"
	}
	return s + "\r\n"
}

func (r pipeReq) full() string { return r.head() + r.body }

// gate holds the handler of one chosen request until it is opened.
type gate struct {
	mu   sync.Mutex
	id   string
	in   chan struct{} // closed when that handler has started
	open chan struct{}
}

// hold makes the handler of request id wait, from now on, until open is
// called (also called at the end of the test).
func (g *gate) hold(t *testing.T, id string) (in <-chan struct{}, open func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.id, g.in, g.open = id, make(chan struct{}), make(chan struct{})
	var once sync.Once
	ch := g.open
	open = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(open)
	return g.in, open
}

// wrap holds the chosen handler; every handler reads its request's body
// first (so that an Expect: 100-continue request gets its interim answer).
func (g *gate) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		g.mu.Lock()
		held := g.id != "" && r.URL.Path == "/work/"+g.id
		in, open := g.in, g.open
		if held {
			g.id = ""
		}
		g.mu.Unlock()
		if held {
			close(in)
			<-open
		}
		h.ServeHTTP(w, r)
	})
}

func waitIn(t *testing.T, in <-chan struct{}) {
	t.Helper()
	select {
	case <-in:
	case <-time.After(10 * time.Second):
		t.Fatal("the held handler did not start")
	}
}

// pipeScenario sends three requests a, b, c on rc in its own way and reads
// whatever it must read on the way; it returns how many final responses it
// read and checked (the caller reads and checks the others). pipelined is
// how many of the requests the agent must have queued behind the request
// being served.
type pipeScenario struct {
	name      string
	pipelined int64
	reqs      func(a, b, c string) [3]pipeReq
	send      func(t *testing.T, rc *agenttest.RawClient, g *gate, r [3]pipeReq) (read int)
}

func plainReqs(a, b, c string) [3]pipeReq {
	return [3]pipeReq{{method: "GET", id: a}, {method: "GET", id: b}, {method: "GET", id: c}}
}

func write(t *testing.T, rc *agenttest.RawClient, s string) {
	t.Helper()
	require.NoError(t, rc.WriteRaw([]byte(s)))
}

// cutIn returns the offset in b's head just inside its Retrace-Trace-Id
// line, so that a read may end inside the header the agent strips.
func cutIn(r pipeReq) int {
	return strings.Index(r.head(), hook.TraceHeader) + 9
}

var pipeScenarios = []pipeScenario{
	{
		name: "one write", pipelined: 2, reqs: plainReqs,
		send: func(t *testing.T, rc *agenttest.RawClient, _ *gate, r [3]pipeReq) int {
			write(t, rc, r[0].full()+r[1].full()+r[2].full())
			return 0
		},
	},
	{
		name: "one write, a body and a HEAD", pipelined: 2,
		reqs: func(a, b, c string) [3]pipeReq {
			return [3]pipeReq{{method: "POST", id: a, body: `{"order":"` + a + `"}`}, {method: "HEAD", id: b}, {method: "GET", id: c}}
		},
		send: func(t *testing.T, rc *agenttest.RawClient, _ *gate, r [3]pipeReq) int {
			write(t, rc, r[0].full()+r[1].full()+r[2].full())
			return 0
		},
	},
	{
		// b's head is cut inside its Retrace-Trace-Id line; the rest comes
		// with c once a's response has been read: c waits behind b.
		name: "second head split, rest after the first response", pipelined: 1, reqs: plainReqs,
		send: func(t *testing.T, rc *agenttest.RawClient, _ *gate, r [3]pipeReq) int {
			cut := cutIn(r[1])
			write(t, rc, r[0].full()+r[1].full()[:cut])
			code, body, err := rc.ReadResponse()
			require.NoError(t, err)
			require.NoError(t, checkResult(r[0].id, code, body, true))
			write(t, rc, r[1].full()[cut:]+r[2].full())
			return 1
		},
	},
	{
		// the rest of b comes while a's handler runs: net/http's
		// background read takes its first byte on a goroutine of its own.
		name: "second head split, rest during the first handler", pipelined: 1, reqs: plainReqs,
		send: func(t *testing.T, rc *agenttest.RawClient, g *gate, r [3]pipeReq) int {
			in, open := g.hold(t, r[0].id)
			cut := cutIn(r[1])
			write(t, rc, r[0].full()+r[1].full()[:cut])
			waitIn(t, in)
			write(t, rc, r[1].full()[cut:]+r[2].full())
			time.Sleep(30 * time.Millisecond)
			open()
			return 0
		},
	},
	{
		// only b's last byte comes while a's handler runs: the background
		// read completes b's head, before a's response has begun.
		name: "second head split before its last byte", pipelined: 1, reqs: plainReqs,
		send: func(t *testing.T, rc *agenttest.RawClient, g *gate, r [3]pipeReq) int {
			in, open := g.hold(t, r[0].id)
			b := r[1].full()
			write(t, rc, r[0].full()+b[:len(b)-1])
			waitIn(t, in)
			write(t, rc, b[len(b)-1:]+r[2].full())
			time.Sleep(30 * time.Millisecond)
			open()
			return 0
		},
	},
	{
		// a is answered "100 Continue" when its handler reads the body;
		// the body comes with b and c: they wait for a's final response.
		name: "expect 100-continue", pipelined: 2,
		reqs: func(a, b, c string) [3]pipeReq {
			return [3]pipeReq{{method: "PUT", id: a, body: "hello", expect: true}, {method: "GET", id: b}, {method: "GET", id: c}}
		},
		send: func(t *testing.T, rc *agenttest.RawClient, _ *gate, r [3]pipeReq) int {
			write(t, rc, r[0].head())
			code, _, err := rc.ReadResponse()
			require.NoError(t, err)
			require.Equal(t, http.StatusContinue, code)
			write(t, rc, r[0].body+r[1].full()+r[2].full())
			return 0
		},
	},
}

// runPipelined runs every scenario on a fresh connection to addr and checks
// each answer: the handler and the goroutines it started saw the request's
// own trace and its downstreams answered its own id.
func runPipelined(t *testing.T, addr string, g *gate) {
	for _, sc := range pipeScenarios {
		t.Run(sc.name, func(t *testing.T) {
			rc, err := agenttest.DialRaw(addr)
			require.NoError(t, err)
			defer rc.Close()
			before := hook.ReadStats()
			r := sc.reqs(agenttest.NewID(), agenttest.NewID(), agenttest.NewID())
			read := sc.send(t, rc, g, r)
			for _, q := range r[read:] {
				code, body, err := rc.ReadResponseTo(q.method)
				require.NoError(t, err, q.id)
				if q.method == "HEAD" {
					require.Equal(t, http.StatusOK, code)
					continue
				}
				require.NoError(t, checkResult(q.id, code, body, true), "request %s", q.id)
			}
			st := hook.ReadStats()
			require.Equal(t, sc.pipelined, st.Pipelined-before.Pipelined, "requests that waited their turn")
			require.Equal(t, int64(3), st.Traced-before.Traced)
		})
	}
}

// TestReplayPipelined: in replay mode every frame of every pipelined
// request's downstream calls carries that request's trace.
func TestReplayPipelined(t *testing.T) {
	f := newFanOut(t)
	mock := agenttest.NewMock(t, map[string]agenttest.Proto{
		f.line.Addr:                     agenttest.ProtoLine,
		f.redisAddr:                     agenttest.ProtoRESP,
		f.echo.Listener.Addr().String(): agenttest.ProtoHTTP,
	})
	before, boundBefore := hook.ReadStats(), trace.Bound()
	install(t, hook.Config{Mode: hook.Replay, MockAddr: mock.Addr, Passthrough: []string{f.sutLn.Addr().String()}})
	g := &gate{}
	addr := f.serveWith(t, g.wrap)

	runPipelined(t, addr, g)

	ms := mock.Stats()
	require.Empty(t, ms.Misattributed, "frames charged to the wrong trace")
	require.Empty(t, ms.Leaks, "Retrace-* headers reached the HTTP downstream")
	require.Empty(t, ms.Errors)
	// line + SET + GET + HTTP per request, at least
	require.GreaterOrEqual(t, ms.Tagged, len(pipeScenarios)*3*4)
	require.Zero(t, hook.ReadStats().Failures-before.Failures)
	// the server closes the connections the clients closed: no binding stays
	require.Eventually(t, func() bool { return trace.Bound() == boundBefore }, 5*time.Second, 5*time.Millisecond,
		"bindings left: %d, before %d", trace.Bound(), boundBefore)
}

// TestRecordPipelined: in record mode every report — the request's bytes,
// its response, its downstream writes — carries the request's own trace,
// and no Retrace-* header reaches the application.
func TestRecordPipelined(t *testing.T) {
	f := newFanOut(t)
	rec := &testRecorder{client: f.sutLn.Addr().String()}
	before := hook.ReadStats()
	install(t, hook.Config{Mode: hook.Record, Recorder: rec})
	g := &gate{}
	addr := f.serveWith(t, g.wrap)

	runPipelined(t, addr, g)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Empty(t, rec.misattributed)
	require.Empty(t, rec.leaks)
	require.Equal(t, len(pipeScenarios)*3, rec.starts)
	require.Zero(t, hook.ReadStats().Failures-before.Failures)
	t.Logf("recorder: %d starts, reports by kind %v", rec.starts, rec.kinds)
}

// TestByteServerPipelined: a server that is not net/http, reading 1, 7 or
// 4096 bytes at a time, answers three requests sent in one write; each
// answer says the trace bound when its head was taken from the server's
// buffer.
func TestByteServerPipelined(t *testing.T) {
	sizes := []int{1, 7, 4096}
	addrs := map[int]string{}
	var servers []string
	for _, n := range sizes {
		addrs[n] = startByteServer(t, n)
		servers = append(servers, addrs[n])
	}
	install(t, hook.Config{Mode: hook.Replay, MockAddr: "127.0.0.1:9", Passthrough: servers, Logger: discardLogger()})
	for _, n := range sizes {
		t.Run(fmt.Sprintf("read%d", n), func(t *testing.T) {
			rc, err := agenttest.DialRaw(addrs[n])
			require.NoError(t, err)
			defer rc.Close()
			ids := []string{agenttest.NewID(), agenttest.NewID(), agenttest.NewID()}
			var send string
			for i, id := range ids {
				body := strings.Repeat("b", i*3)
				send += "POST /p/" + id + " HTTP/1.1\r\nRetrace-Trace-Id: " + id + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
			}
			write(t, rc, send)
			for i, id := range ids {
				_, raw, err := rc.ReadResponse()
				require.NoError(t, err)
				var sr seenRequest
				require.NoError(t, json.Unmarshal(raw, &sr))
				require.Equal(t, id, sr.TID, "request %d", i)
				require.NotContains(t, sr.Head, "Retrace")
				require.Equal(t, strings.Repeat("b", i*3), sr.Body)
			}
		})
	}
}

// TestPipelineBound: a client that pipelines more requests than the agent
// queues for one connection is still served whole; the agent says so once,
// and keeps no binding once the connection is closed.
//
// The queue overflows only if the server reads more heads than it holds
// before it begins the first response: the server starts reading once the
// whole pipeline is written, in one read (1100 heads of 57 bytes stay
// under loopback's first receive window, so the write does not wait for
// the server).
func TestPipelineBound(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	addr := ln.Addr().String()
	written := make(chan struct{})
	served := serveOne(ln, func(c net.Conn) {
		<-written
		serveBytes(c, 64<<10)
	})
	logs := &logBuffer{}
	install(t, hook.Config{Mode: hook.Replay, MockAddr: "127.0.0.1:9", Passthrough: []string{addr}, Logger: logs.logger()})
	boundBefore := trace.Bound()
	rc, err := agenttest.DialRaw(addr)
	require.NoError(t, err)
	const n = 1100
	var send strings.Builder
	for range n {
		send.WriteString("GET /q HTTP/1.1\r\nRetrace-Trace-Id: " + agenttest.NewID() + "\r\n\r\n")
	}
	require.Less(t, send.Len(), 64<<10)
	write(t, rc, send.String())
	close(written)
	for i := range n {
		code, _, err := rc.ReadResponse()
		require.NoError(t, err, "response %d", i)
		require.Equal(t, http.StatusOK, code)
	}
	require.NoError(t, rc.Close())
	<-served
	require.Equal(t, 1, strings.Count(logs.String(), "more pipelined requests wait"), logs.String())
	require.Equal(t, boundBefore, trace.Bound(), "bindings left")
}

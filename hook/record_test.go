package hook_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/agenttest"
	"github.com/retrace-dev/retrace/trace"
)

// testRecorder checks every report against the trace ids its bytes name.
type testRecorder struct {
	panics bool // every method panics (fail-open test)
	// client is the service's address: the test's own clients write it
	// through raw system calls, so only their reads are reported.
	client string

	mu            sync.Mutex
	starts        int
	tagged        int
	misattributed []string
	leaks         []string
	closed        int
	kinds         map[string]int
	wrote         map[uint64]bool // outbound connections with a reported write
	early         []string        // answers reported before any request on their connection
}

var _ hook.Recorder = (*testRecorder)(nil)

func (r *testRecorder) note(kind, tid string, p []byte) {
	if r.panics {
		panic("recorder exploded in " + kind)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kinds == nil {
		r.kinds = map[string]int{}
	}
	r.kinds[kind]++
	ids := agenttest.IDPattern.FindAll(p, -1)
	if len(ids) > 0 {
		r.tagged++
	}
	for _, id := range ids {
		if string(id) != tid {
			r.misattributed = append(r.misattributed, fmt.Sprintf("%s with tid %q carries %s: %q", kind, tid, id, p))
			break
		}
	}
	if kind != "inbound-write" && bytes.Contains(bytes.ToLower(p), []byte("\nretrace-")) {
		r.leaks = append(r.leaks, fmt.Sprintf("%s: %q", kind, p))
	}
}

func (r *testRecorder) StartRequest(c *hook.ConnInfo, h trace.RequestHead) string {
	if r.panics {
		panic("recorder exploded in StartRequest")
	}
	if !c.Inbound {
		panic("StartRequest on an outbound connection")
	}
	// Only the service's requests are sampled; the echo downstream runs in
	// this process too.
	id, ok := strings.CutPrefix(h.Path, "/work/")
	if !ok {
		return ""
	}
	r.mu.Lock()
	r.starts++
	r.mu.Unlock()
	return id
}

func (r *testRecorder) InboundRead(c *hook.ConnInfo, tid string, p []byte) {
	r.note("inbound-read", tid, p)
}
func (r *testRecorder) InboundWrite(c *hook.ConnInfo, tid string, p []byte) {
	r.note("inbound-write", tid, p)
}
func (r *testRecorder) OutboundWrite(c *hook.ConnInfo, tid string, p []byte) {
	if c.Inbound {
		panic("OutboundWrite on an inbound connection")
	}
	r.mu.Lock()
	if r.wrote == nil {
		r.wrote = map[uint64]bool{}
	}
	r.wrote[c.ID] = true
	r.mu.Unlock()
	r.note("outbound-write", tid, p)
}
func (r *testRecorder) OutboundRead(c *hook.ConnInfo, p []byte) {
	if r.panics {
		panic("recorder exploded in OutboundRead")
	}
	// Every downstream here (line, RESP, HTTP) answers only what it was
	// sent: its bytes must never be reported before the request's.
	r.mu.Lock()
	if !r.wrote[c.ID] && c.Remote != r.client && len(r.early) < 3 {
		r.early = append(r.early, fmt.Sprintf("%s: %q", c.Remote, p))
	}
	r.mu.Unlock()
}
func (r *testRecorder) Closed(c *hook.ConnInfo) {
	if r.panics {
		panic("recorder exploded in Closed")
	}
	r.mu.Lock()
	r.closed++
	r.mu.Unlock()
}

// TestRecordFanOut runs the fan-out against the real downstreams in record
// mode: the recorder gets every request's bytes charged to its trace, the
// in-band header is stripped before the real HTTP downstream (which echoes
// what it received), and neither the application nor a downstream ever
// sees a Retrace-* header.
func TestRecordFanOut(t *testing.T) {
	f := newFanOut(t)
	rec := &testRecorder{client: f.sutLn.Addr().String()}
	before := hook.ReadStats()
	install(t, hook.Config{Mode: hook.Record, Recorder: rec})
	addr := f.serve(t)

	const clients, rounds = 32, 3
	drive(t, addr, clients, rounds, true)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Empty(t, rec.misattributed)
	require.Empty(t, rec.leaks)
	require.Empty(t, rec.early, "answers reported before their requests")
	require.Equal(t, clients*rounds, rec.starts)
	require.GreaterOrEqual(t, rec.closed, clients, "the clients' closed connections were reported")
	// Per request: its inbound request and response, the line request,
	// SET, GET and the HTTP request at least.
	require.GreaterOrEqual(t, rec.tagged, clients*rounds*6)
	st := hook.ReadStats()
	require.Zero(t, st.Failures-before.Failures)
	require.Zero(t, st.RedirectedConnects-before.RedirectedConnects)
	require.GreaterOrEqual(t, st.StrippedRequests-before.StrippedRequests, int64(clients*rounds))
	t.Logf("recorder: %d starts, %d reports naming a trace, by kind %v", rec.starts, rec.tagged, rec.kinds)
}

// TestOffFanOut: without the agent the same service works and sees no
// trace; Mode Off installs nothing.
func TestOffFanOut(t *testing.T) {
	f := newFanOut(t)
	undo, err := hook.Install(hook.Config{})
	require.NoError(t, err)
	undo()
	undo()
	require.Empty(t, hook.ReadStats().Patched)
	addr := f.serve(t)
	drive(t, addr, 8, 2, false)
}

// TestRecorderPanicsFailOpen: a recorder that panics in every method costs
// the application nothing: every request is answered correctly, the
// panics are counted.
func TestRecorderPanicsFailOpen(t *testing.T) {
	f := newFanOut(t)
	before := hook.ReadStats()
	install(t, hook.Config{Mode: hook.Record, Recorder: &testRecorder{panics: true}, Logger: discardLogger()})
	addr := f.serve(t)
	drive(t, addr, 4, 2, false)
	require.Greater(t, hook.ReadStats().Failures, before.Failures)
}

// headRecorder keeps the heads StartRequest gets and samples none.
type headRecorder struct {
	mu    sync.Mutex
	heads []trace.RequestHead
}

func (r *headRecorder) StartRequest(_ *hook.ConnInfo, h trace.RequestHead) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.heads = append(r.heads, h)
	return ""
}
func (r *headRecorder) InboundRead(*hook.ConnInfo, string, []byte)   {}
func (r *headRecorder) InboundWrite(*hook.ConnInfo, string, []byte)  {}
func (r *headRecorder) OutboundWrite(*hook.ConnInfo, string, []byte) {}
func (r *headRecorder) OutboundRead(*hook.ConnInfo, []byte)          {}
func (r *headRecorder) Closed(*hook.ConnInfo)                        {}

// pathFreeRecorder says it does not read the path (hook.PathUser).
type pathFreeRecorder struct{ headRecorder }

func (*pathFreeRecorder) UsesPath() bool { return false }

// TestRecorderPath: StartRequest gets each request's method and path,
// unless the Recorder says (hook.PathUser) that it does not read the path;
// the application reads the same bytes either way.
func TestRecorderPath(t *testing.T) {
	reqs := []string{
		"GET /orders/42?x=1 HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /pay HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok",
	}
	for _, c := range []struct {
		name      string
		rec       interface{ got() []trace.RequestHead }
		wantPaths []string
	}{
		{"reads the path", &headRecorder{}, []string{"/orders/42?x=1", "/pay"}},
		{"path-free", &pathFreeRecorder{}, []string{"", ""}},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr := startByteServer(t, 4096)
			install(t, hook.Config{Mode: hook.Record, Recorder: c.rec.(hook.Recorder)})
			rc, err := agenttest.DialRaw(addr)
			require.NoError(t, err)
			defer rc.Close()
			for _, req := range reqs {
				require.NoError(t, rc.WriteRaw([]byte(req)))
				code, raw, err := rc.ReadResponse()
				require.NoError(t, err)
				require.Equal(t, 200, code)
				var sr seenRequest
				require.NoError(t, json.Unmarshal(raw, &sr))
				require.Equal(t, req, sr.Head+sr.Body)
			}
			heads := c.rec.got()
			require.Len(t, heads, len(reqs))
			for i, h := range heads {
				require.Equal(t, []string{"GET", "POST"}[i], h.Method)
				require.Equal(t, c.wantPaths[i], h.Path)
			}
		})
	}
}

func (r *headRecorder) got() []trace.RequestHead {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]trace.RequestHead(nil), r.heads...)
}

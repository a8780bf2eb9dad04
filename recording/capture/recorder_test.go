package capture

import (
	"context"
	"fmt"
	"github.com/retrace-dev/retrace/wire/http1"
	"github.com/retrace-dev/retrace/wire/mysql"
	"github.com/retrace-dev/retrace/wire/redis"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
)

// sink is a recording.Writer that keeps sessions in memory.
type sink struct {
	mu sync.Mutex
	ss []*recording.Session
}

func (s *sink) Write(_ context.Context, ss []*recording.Session) error {
	s.mu.Lock()
	s.ss = append(s.ss, ss...)
	s.mu.Unlock()
	return nil
}
func (s *sink) Flush(context.Context) error { return nil }
func (s *sink) Close() error                { return nil }

func (s *sink) byID(id string) *recording.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.ss {
		if x.ID == id {
			return x
		}
	}
	return nil
}

// discard is a recording.Writer that drops what it gets.
type discard struct{}

func (discard) Write(context.Context, []*recording.Session) error { return nil }
func (discard) Flush(context.Context) error                       { return nil }
func (discard) Close() error                                      { return nil }

func newTestRecorder(t *testing.T, rate float64, maxPayload int) (*Recorder, *sink) {
	smp, err := recording.NewSampler(rate)
	require.NoError(t, err)
	out := &sink{}
	pipe, err := recording.NewPipeline(recording.PipelineConfig{Store: out, Sampler: smp, MaxPayload: maxPayload})
	require.NoError(t, err)
	r, err := New(Config{Pipeline: pipe, App: "t"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	newConns()
	return r, out
}

// The connections of the tests: an inbound one and three dialled ones. A
// Recorder keeps its state of a connection in the ConnInfo, so each
// Recorder gets new ones (newConns).
var inConn, rdConn, myConn, htConn *hook.ConnInfo

func newConns() {
	inConn = &hook.ConnInfo{ID: 1, Inbound: true, Local: "127.0.0.1:8080", Remote: "127.0.0.1:5000"}
	rdConn = &hook.ConnInfo{ID: 2, Local: "127.0.0.1:5001", Remote: "127.0.0.1:6379"}
	myConn = &hook.ConnInfo{ID: 3, Local: "127.0.0.1:5002", Remote: "127.0.0.1:3306"}
	htConn = &hook.ConnInfo{ID: 4, Local: "127.0.0.1:5003", Remote: "127.0.0.1:9000"}
}

const (
	getReq = "GET /x HTTP/1.1\r\nHost: a\r\n\r\n"
	okResp = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
)

// request runs one inbound request through r: head, then body() (the
// downstream work, on a goroutine bound to the trace), then the response.
func request(t *testing.T, r *Recorder, c *hook.ConnInfo, head trace.RequestHead, body func(tid string)) string {
	t.Helper()
	if head.Method == "" {
		head.Method = "GET"
	}
	tid := r.StartRequest(c, head)
	require.NotEmpty(t, tid)
	r.InboundRead(c, tid, []byte(getReq))
	release := trace.Bind(&trace.Trace{ID: tid})
	body(tid)
	release()
	r.InboundWrite(c, tid, []byte(okResp))
	return tid
}

func settle(t *testing.T, r *Recorder) {
	t.Helper()
	require.Zero(t, r.Stats().Active)
	require.NoError(t, r.Flush(context.Background()))
}

func reqs(s *recording.Session) []string {
	var out []string
	for _, c := range s.Calls {
		tag := ""
		if c.Setup {
			tag = "setup "
		}
		out = append(out, fmt.Sprintf("%s%s %q → %q", tag, c.Proto, c.Request, c.Response))
	}
	return out
}

func TestUnreportedWritesAnswersAreIgnored(t *testing.T) {
	r, out := newTestRecorder(t, 1, -1)
	a := request(t, r, inConn, trace.RequestHead{}, func(tid string) {
		r.OutboundWrite(rdConn, tid, []byte("*2\r\n$3\r\nGET\r\n$1\r\na\r\n"))
		r.OutboundRead(rdConn, []byte("$1\r\n"))
		r.OutboundRead(rdConn, []byte("1\r\n"))
	})
	// an unsampled request wrote on the connection (not reported) and
	// reads the answer on its own, untraced, goroutine
	r.OutboundRead(rdConn, []byte("$1\r\n2\r\n"))
	b := request(t, r, inConn, trace.RequestHead{}, func(tid string) {
		r.OutboundWrite(rdConn, tid, []byte("*2\r\n$3\r\nGET\r\n$1\r\nb\r\n"))
		r.OutboundRead(rdConn, []byte("$1\r\n3\r\n"))
	})
	settle(t, r)
	assert.Equal(t, []string{`redis "*2\r\n$3\r\nGET\r\n$1\r\na\r\n" → "$1\r\n1\r\n"`}, reqs(out.byID(a)))
	assert.Equal(t, []string{`redis "*2\r\n$3\r\nGET\r\n$1\r\nb\r\n" → "$1\r\n3\r\n"`}, reqs(out.byID(b)))
}

func TestHTTPResponseBeforeItsRequestIsReported(t *testing.T) {
	r, out := newTestRecorder(t, 1, -1)
	a := request(t, r, inConn, trace.RequestHead{}, func(tid string) {
		r.OutboundWrite(htConn, tid, []byte("GET /1 HTTP/1.1\r\n\r\n"))
		r.OutboundRead(htConn, []byte("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1"))
		// the transport's reader saw the second answer before the writer's
		// report of the second request
		r.OutboundRead(htConn, []byte("HTTP/1.1 200 OK\r\nContent-Len"))
		r.OutboundWrite(htConn, tid, []byte("GET /2 HTTP/1.1\r\n\r\n"))
		r.OutboundRead(htConn, []byte("gth: 1\r\n\r\n2"))
	})
	settle(t, r)
	assert.Equal(t, []string{
		`http "GET /1 HTTP/1.1\r\n\r\n" → "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1"`,
		`http "GET /2 HTTP/1.1\r\n\r\n" → "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n2"`,
	}, reqs(out.byID(a)))
}

func TestFirstHTTPAnswerBeforeItsRequestIsReported(t *testing.T) {
	r, out := newTestRecorder(t, 1, -1)
	a := request(t, r, inConn, trace.RequestHead{}, func(tid string) {
		// a new connection: the reader reports the answer first
		r.OutboundRead(htConn, []byte("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1"))
		r.OutboundWrite(htConn, tid, []byte("GET /1 HTTP/1.1\r\n\r\n"))
	})
	settle(t, r)
	assert.Equal(t, []string{
		`http "GET /1 HTTP/1.1\r\n\r\n" → "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1"`,
	}, reqs(out.byID(a)))
}

func TestHeadAnswerHasNoBody(t *testing.T) {
	r, out := newTestRecorder(t, 1, -1)
	a := request(t, r, inConn, trace.RequestHead{}, func(tid string) {
		r.OutboundWrite(htConn, tid, []byte("HEAD / HTTP/1.1\r\n\r\n"))
		r.OutboundRead(htConn, []byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"))
		// done by framing: the next answer is held for the next request
		r.OutboundRead(htConn, []byte("HTTP/1.1 204 No Content\r\n\r\n"))
		r.OutboundWrite(htConn, tid, []byte("GET / HTTP/1.1\r\n\r\n"))
	})
	settle(t, r)
	assert.Equal(t, []string{
		`http "HEAD / HTTP/1.1\r\n\r\n" → "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"`,
		`http "GET / HTTP/1.1\r\n\r\n" → "HTTP/1.1 204 No Content\r\n\r\n"`,
	}, reqs(out.byID(a)))
}

func TestExpectContinueIsOneCall(t *testing.T) {
	r, out := newTestRecorder(t, 1, -1)
	a := request(t, r, inConn, trace.RequestHead{}, func(tid string) {
		r.OutboundWrite(htConn, tid, []byte("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n"))
		r.OutboundRead(htConn, []byte("HTTP/1.1 100 Continue\r\n\r\n"))
		r.OutboundWrite(htConn, tid, []byte("x"))
		r.OutboundRead(htConn, []byte("HTTP/1.1 204 No Content\r\n\r\n"))
		r.OutboundWrite(htConn, tid, []byte("GET / HTTP/1.1\r\n\r\n"))
	})
	settle(t, r)
	calls := reqs(out.byID(a))
	require.Len(t, calls, 2)
	assert.Equal(t, `http "POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx" → "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"`, calls[0])
}

func TestSetupKeptWithFirstSession(t *testing.T) {
	r, out := newTestRecorder(t, 1, -1)
	greeting := "\x2a\x00\x00\x00\x0a5.5.5-10.11-MariaDB\x00" + strings.Repeat("x", 22)
	// a pool opens the connection on a goroutine of no request
	r.OutboundRead(myConn, []byte(greeting))
	r.OutboundWrite(myConn, "", []byte("\x05\x00\x00\x01auth!"))
	r.OutboundRead(myConn, []byte("\x07\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00"))
	query := func(q string) func(string) {
		return func(tid string) {
			pkt := append([]byte{byte(len(q) + 1), 0, 0, 0, 3}, q...)
			r.OutboundWrite(myConn, tid, pkt)
			r.OutboundRead(myConn, []byte("\x07\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00"))
		}
	}
	a := request(t, r, inConn, trace.RequestHead{}, query("SET NAMES utf8"))
	b := request(t, r, inConn, trace.RequestHead{}, query("SELECT 1"))
	settle(t, r)
	sa, sb := out.byID(a), out.byID(b)
	require.Len(t, sa.Calls, 3)
	for i, c := range sa.Calls {
		assert.True(t, c.Setup, "call %d: greeting, authentication and SET NAMES are set-up", i)
		assert.Equal(t, "mysql", c.Proto)
		assert.EqualValues(t, myConn.ID, c.Conn)
	}
	assert.Empty(t, sa.Calls[0].Request, "the server spoke first")
	assert.Less(t, sa.Calls[0].StartNs, int64(0), "opened before the request")
	require.Len(t, sb.Calls, 1)
	assert.False(t, sb.Calls[0].Setup)
}

// Requests of one distributed trace (one traceparent) are sessions of
// their own, each with a fresh id, all carrying the trace id.
func TestTraceParentIsAFieldNotTheID(t *testing.T) {
	r, out := newTestRecorder(t, 1, -1)
	const tp = "4bf92f3577b34da6a3ce929d0e0e4736"
	var inner string
	outer := request(t, r, inConn, trace.RequestHead{TraceParent: tp}, func(string) {
		// a second request of the same distributed trace while the first runs
		c2 := &hook.ConnInfo{ID: 9, Inbound: true}
		inner = request(t, r, c2, trace.RequestHead{TraceParent: tp}, func(string) {})
	})
	third := request(t, r, inConn, trace.RequestHead{TraceParent: tp}, func(string) {})
	settle(t, r)
	ids := map[string]bool{outer: true, inner: true, third: true}
	assert.Len(t, ids, 3, "one id per request")
	for id := range ids {
		assert.NotEqual(t, tp, id)
		assert.True(t, trace.ValidID(id))
		s := out.byID(id)
		require.NotNil(t, s, id)
		assert.Equal(t, tp, s.Trace)
	}
}

func TestResponseEndsWithTheConnection(t *testing.T) {
	r, out := newTestRecorder(t, 1, 8)
	tid := r.StartRequest(inConn, trace.RequestHead{Method: "GET"})
	r.InboundRead(inConn, tid, []byte(getReq))
	r.InboundWrite(inConn, tid, []byte("HTTP/1.0 200 OK\r\n\r\nuntil close"))
	assert.EqualValues(t, 1, r.Stats().Active, "no length: the response goes on")
	r.Closed(inConn)
	settle(t, r)
	s := out.byID(tid)
	require.NotNil(t, s)
	assert.Equal(t, "HTTP/1.0", string(s.Inbound.Response), "kept up to the cap")
	assert.True(t, s.Inbound.ResponseTruncated)
	assert.True(t, s.Inbound.RequestTruncated)

	// a request whose connection closes before any response is dropped
	tid = r.StartRequest(inConn, trace.RequestHead{Method: "GET"})
	r.InboundRead(inConn, tid, []byte(getReq))
	r.Closed(inConn)
	assert.EqualValues(t, 1, r.Stats().Incomplete)
	assert.Zero(t, r.Stats().Active)
}

// TestPipelinedSessions: three requests read before any response (a client
// pipelined them) are three sessions in progress at once; each gets its
// own request, its own calls and, in order, its own response.
func TestPipelinedSessions(t *testing.T) {
	r, out := newTestRecorder(t, 1, -1)
	var tids []string
	for i := range 3 {
		tid := r.StartRequest(inConn, trace.RequestHead{Method: "GET"})
		require.NotEmpty(t, tid)
		r.InboundRead(inConn, tid, fmt.Appendf(nil, "GET /%d HTTP/1.1\r\n\r\n", i))
		tids = append(tids, tid)
	}
	assert.EqualValues(t, 3, r.Stats().Active)
	for i, tid := range tids {
		release := trace.Bind(&trace.Trace{ID: tid}) // the handler's turn
		r.OutboundWrite(rdConn, tid, fmt.Appendf(nil, "*2\r\n$3\r\nGET\r\n$1\r\n%d\r\n", i))
		r.OutboundRead(rdConn, fmt.Appendf(nil, "$1\r\n%d\r\n", i))
		release()
		// the response in two writes, the second completing it
		r.InboundWrite(inConn, tid, []byte("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n"))
		assert.EqualValues(t, 3-i, r.Stats().Active, "response %d not complete", i)
		r.InboundWrite(inConn, tid, fmt.Appendf(nil, "%d", i))
		assert.EqualValues(t, 2-i, r.Stats().Active, "response %d complete", i)
	}
	settle(t, r)
	for i, tid := range tids {
		s := out.byID(tid)
		require.NotNil(t, s)
		assert.Equal(t, fmt.Sprintf("GET /%d HTTP/1.1\r\n\r\n", i), string(s.Inbound.Request))
		assert.Equal(t, fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n%d", i), string(s.Inbound.Response))
		assert.Equal(t, []string{fmt.Sprintf(`redis "*2\r\n$3\r\nGET\r\n$1\r\n%d\r\n" → "$1\r\n%d\r\n"`, i, i)}, reqs(s))
	}
	assert.Zero(t, r.Stats().Incomplete)
}

// TestPipelinedSessionsEndWithTheConnection: when the connection closes,
// every session still in progress on it ends: one with a response so far
// is recorded, one without is dropped.
func TestPipelinedSessionsEndWithTheConnection(t *testing.T) {
	r, out := newTestRecorder(t, 1, -1)
	a := r.StartRequest(inConn, trace.RequestHead{Method: "GET"})
	b := r.StartRequest(inConn, trace.RequestHead{Method: "GET"})
	c := r.StartRequest(inConn, trace.RequestHead{Method: "GET"})
	r.InboundWrite(inConn, a, []byte(okResp))
	r.InboundWrite(inConn, b, []byte("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\npart"))
	assert.EqualValues(t, 2, r.Stats().Active)
	r.Closed(inConn)
	settle(t, r)
	assert.NotNil(t, out.byID(a))
	require.NotNil(t, out.byID(b))
	assert.Equal(t, "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\npart", string(out.byID(b).Inbound.Response))
	assert.Nil(t, out.byID(c))
	assert.EqualValues(t, 1, r.Stats().Incomplete)
}

// TestNextRequestEndsAnUnframedResponse: a request read once the response
// before it has begun is the next one served, so that response is over even
// when its framing never said so.
func TestNextRequestEndsAnUnframedResponse(t *testing.T) {
	r, out := newTestRecorder(t, 1, -1)
	a := r.StartRequest(inConn, trace.RequestHead{Method: "GET"})
	r.InboundWrite(inConn, a, []byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n..."))
	b := r.StartRequest(inConn, trace.RequestHead{Method: "GET"})
	assert.EqualValues(t, 1, r.Stats().Active)
	r.InboundWrite(inConn, b, []byte(okResp))
	settle(t, r)
	assert.NotNil(t, out.byID(a))
	assert.NotNil(t, out.byID(b))
	assert.Zero(t, r.Stats().Incomplete)
}

// TestPipelinedBehindContinue: a request read after "100 Continue" was
// written, before the final response, is pipelined too: the session
// before it goes on until its final response.
func TestPipelinedBehindContinue(t *testing.T) {
	r, out := newTestRecorder(t, 1, -1)
	a := r.StartRequest(inConn, trace.RequestHead{Method: "PUT"})
	r.InboundWrite(inConn, a, []byte("HTTP/1.1 100 Continue\r\n\r\n"))
	b := r.StartRequest(inConn, trace.RequestHead{Method: "GET"})
	assert.EqualValues(t, 2, r.Stats().Active)
	r.InboundWrite(inConn, a, []byte(okResp))
	r.InboundWrite(inConn, b, []byte(okResp))
	settle(t, r)
	require.NotNil(t, out.byID(a))
	assert.Equal(t, "HTTP/1.1 100 Continue\r\n\r\n"+okResp, string(out.byID(a).Inbound.Response))
	require.NotNil(t, out.byID(b))
	assert.Equal(t, okResp, string(out.byID(b).Inbound.Response))
}

func TestMaxActive(t *testing.T) {
	smp, _ := recording.NewSampler(1)
	pipe, err := recording.NewPipeline(recording.PipelineConfig{Store: &sink{}, Sampler: smp})
	require.NoError(t, err)
	r, err := New(Config{Pipeline: pipe, MaxActive: 2})
	require.NoError(t, err)
	defer r.Close(context.Background())
	for i := range 3 {
		tid := r.StartRequest(&hook.ConnInfo{ID: uint64(10 + i), Inbound: true}, trace.RequestHead{Method: "GET"})
		assert.Equal(t, i < 2, tid != "", "request %d", i)
	}
	assert.EqualValues(t, 1, r.Stats().Overflow)
}

func TestUnsampledRequestsDoNotAllocate(t *testing.T) {
	r, _ := newTestRecorder(t, 0, -1)
	head := trace.RequestHead{Method: "GET", Path: "/"}
	ok := []byte("+OK\r\n") // a client's read buffer, on the heap (it reaches the protocols' Detect)
	allocs := testing.AllocsPerRun(1000, func() {
		if r.StartRequest(inConn, head) != "" {
			t.Fatal("sampled at rate 0")
		}
		// reads on pooled connections of unsampled requests
		r.OutboundRead(rdConn, ok)
	})
	assert.Zero(t, allocs)
}

func TestUnsampledHTTPCallsDoNotAllocate(t *testing.T) {
	r, _ := newTestRecorder(t, 0, -1)
	req, resp := []byte("GET / HTTP/1.1\r\n\r\n"), []byte("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1")
	r.OutboundWrite(htConn, "", req)
	r.OutboundRead(htConn, resp)
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		r.OutboundWrite(htConn, "", req)
		r.OutboundRead(htConn, resp)
	}))
}

// TestUnsampledHTTPBetweenSampled: an exchange of no sampled request on a
// keep-alive connection between two sampled ones is in neither session.
func TestUnsampledHTTPBetweenSampled(t *testing.T) {
	r, out := newTestRecorder(t, 1, -1)
	a := request(t, r, inConn, trace.RequestHead{}, func(tid string) {
		r.OutboundWrite(htConn, tid, []byte("GET /1 HTTP/1.1\r\n\r\n"))
		r.OutboundRead(htConn, []byte("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1"))
	})
	// a request the agent did not trace uses the connection
	r.OutboundWrite(htConn, "", []byte("POST /x HTTP/1.1\r\nContent-Length: 1\r\n\r\n"))
	r.OutboundWrite(htConn, "", []byte("x"))
	r.OutboundRead(htConn, []byte("HTTP/1.1 200 OK\r\nContent-"))
	r.OutboundRead(htConn, []byte("Length: 1\r\n\r\nx"))
	b := request(t, r, inConn, trace.RequestHead{}, func(tid string) {
		r.OutboundWrite(htConn, tid, []byte("GET /2 HTTP/1.1\r\n\r\n"))
		r.OutboundRead(htConn, []byte("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n2"))
	})
	settle(t, r)
	assert.Equal(t, []string{`http "GET /1 HTTP/1.1\r\n\r\n" → "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1"`}, reqs(out.byID(a)))
	assert.Equal(t, []string{`http "GET /2 HTTP/1.1\r\n\r\n" → "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n2"`}, reqs(out.byID(b)))
}

func BenchmarkUnsampledRequest(b *testing.B) {
	smp, _ := recording.NewSampler(0)
	pipe, _ := recording.NewPipeline(recording.PipelineConfig{Store: &sink{}, Sampler: smp})
	r, _ := New(Config{Pipeline: pipe})
	defer r.Close(context.Background())
	newConns()
	head := trace.RequestHead{Method: "GET", Path: "/"}
	resp := []byte("+OK\r\n")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r.StartRequest(inConn, head)
		r.OutboundRead(rdConn, resp)
	}
}

// BenchmarkRecordedRequest is the recorder's own cost for one sampled
// request with three downstream calls (no I/O, no store).
func BenchmarkRecordedRequest(b *testing.B) {
	smp, _ := recording.NewSampler(1)
	pipe, _ := recording.NewPipeline(recording.PipelineConfig{Store: discard{}, Sampler: smp})
	r, _ := New(Config{Pipeline: pipe})
	defer r.Close(context.Background())
	newConns()
	head := trace.RequestHead{Method: "GET", Path: "/"}
	req, resp := []byte(getReq), []byte(okResp)
	rcmd, rrep := []byte("*2\r\n$3\r\nGET\r\n$1\r\na\r\n"), []byte("$1\r\n1\r\n")
	hreq, hresp := []byte("GET /1 HTTP/1.1\r\n\r\n"), []byte("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		tid := r.StartRequest(inConn, head)
		r.InboundRead(inConn, tid, req)
		release := trace.Bind(&trace.Trace{ID: tid})
		for range 2 {
			r.OutboundWrite(rdConn, tid, rcmd)
			r.OutboundRead(rdConn, rrep)
		}
		r.OutboundWrite(htConn, tid, hreq)
		r.OutboundRead(htConn, hresp)
		release()
		r.InboundWrite(inConn, tid, resp)
	}
}

// blocked is a recording.Writer whose Write waits until release is closed.
type blocked struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blocked) Write(context.Context, []*recording.Session) error {
	b.once.Do(func() { close(b.entered) })
	<-b.release
	return nil
}
func (b *blocked) Flush(context.Context) error { return nil }
func (b *blocked) Close() error                { return nil }

func TestBlockedStoreDropsAndNeverBlocksRequests(t *testing.T) {
	st := &blocked{entered: make(chan struct{}), release: make(chan struct{})}
	smp, _ := recording.NewSampler(1)
	pipe, err := recording.NewPipeline(recording.PipelineConfig{Store: st, Sampler: smp, QueueSize: 2, BatchSize: 1})
	require.NoError(t, err)
	r, err := New(Config{Pipeline: pipe})
	require.NoError(t, err)
	request(t, r, inConn, trace.RequestHead{}, func(string) {})
	<-st.entered // the writer holds the first session and is stuck in the store
	const n = 20
	for range n {
		// every request completes although the store does not move
		request(t, r, inConn, trace.RequestHead{}, func(tid string) {
			r.OutboundWrite(rdConn, tid, []byte("*1\r\n$4\r\nPING\r\n"))
		})
	}
	assert.EqualValues(t, n-2, r.Stats().Dropped, "two queued, the rest dropped")
	close(st.release)
	require.NoError(t, r.Close(context.Background()))
	stats := r.Stats()
	assert.EqualValues(t, 3, stats.Recorded)
	assert.EqualValues(t, n+1, stats.Recorded+stats.Dropped)
}

// TestGreetingOverSeveralReads: a server may write the greeting's header
// and body separately (go-mysql-server does), and the client read them
// with two reads or more; the connection is MySQL all the same, and the
// greeting one set-up call.
func TestGreetingOverSeveralReads(t *testing.T) {
	greeting := "\x2a\x00\x00\x00\x0a5.5.5-10.11-MariaDB\x00" + strings.Repeat("x", 22)
	for _, cuts := range [][]int{{4}, {1}, {2}, {3}, {1, 2, 3, 4}, {2, 5}} {
		t.Run(fmt.Sprint(cuts), func(t *testing.T) {
			r, out := newTestRecorder(t, 1, -1)
			prev := 0
			for _, at := range append(cuts, len(greeting)) {
				r.OutboundRead(myConn, []byte(greeting[prev:at]))
				prev = at
			}
			r.OutboundWrite(myConn, "", []byte("\x05\x00\x00\x01auth!"))
			r.OutboundRead(myConn, []byte("\x07\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00"))
			a := request(t, r, inConn, trace.RequestHead{}, func(tid string) {
				r.OutboundWrite(myConn, tid, []byte("\x09\x00\x00\x00\x03SELECT 1"))
				r.OutboundRead(myConn, []byte("\x07\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00"))
			})
			settle(t, r)
			s := out.byID(a)
			require.Len(t, s.Calls, 3, "%q", reqs(s))
			for i, c := range s.Calls {
				assert.Equal(t, "mysql", c.Proto, "call %d", i)
				assert.Equal(t, i < 2, c.Setup, "call %d", i)
			}
			assert.Equal(t, greeting, string(s.Calls[0].Response))
			assert.Empty(t, s.Calls[0].Request)
		})
	}
}

// TestStmtCloseAfterPrepareReadInPieces: the statement id of a
// COM_STMT_PREPARE answer read a few bytes at a time still names the
// statement, so its COM_STMT_CLOSE, written later under another request's
// trace, is charged to the request that prepared it.
func TestStmtCloseAfterPrepareReadInPieces(t *testing.T) {
	greeting := "\x2a\x00\x00\x00\x0a5.5.5-10.11-MariaDB\x00" + strings.Repeat("x", 22)
	prepare := "\x0b\x00\x00\x00\x16SELECT ?+1"
	prepareOK := "\x0c\x00\x00\x01\x00\x07\x00\x00\x00\x01\x00\x01\x00\x00\x00\x00" // statement 7
	closeStmt := "\x05\x00\x00\x00\x19\x07\x00\x00\x00"
	other := &hook.ConnInfo{ID: 5, Inbound: true, Local: "127.0.0.1:8080", Remote: "127.0.0.1:5004"}
	for _, piece := range []int{1, 3, 5, 16} {
		t.Run(fmt.Sprint(piece), func(t *testing.T) {
			r, out := newTestRecorder(t, 1, -1)
			r.OutboundRead(myConn, []byte(greeting))
			r.OutboundWrite(myConn, "", []byte("\x05\x00\x00\x01auth!"))
			r.OutboundRead(myConn, []byte("\x07\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00"))
			var b string
			a := request(t, r, inConn, trace.RequestHead{}, func(tid string) {
				r.OutboundWrite(myConn, tid, []byte(prepare))
				for p := prepareOK; len(p) > 0; p = p[min(piece, len(p)):] {
					r.OutboundRead(myConn, []byte(p[:min(piece, len(p))]))
				}
				b = request(t, r, other, trace.RequestHead{}, func(tid string) {
					r.OutboundWrite(myConn, tid, []byte(closeStmt))
				})
			})
			settle(t, r)
			got := reqs(out.byID(a))
			require.Len(t, got, 4, "%q", got)
			assert.Contains(t, got[2], "SELECT ?+1")
			assert.Contains(t, got[3], `\x19\a\x00\x00\x00`, "the close goes with the prepare")
			assert.Empty(t, out.byID(b).Calls)
		})
	}
}

// The calls of a session come out in the order they started, numbered in
// it, each with its own connection's bytes, however their connections
// interleave — past the 64 calls whose connections are read together too.
func TestSnapshotCalls(t *testing.T) {
	conns := []*outConn{{id: 1, dst: "a:1", proto: redis.Protocol}, {id: 2, dst: "b:2", proto: mysql.Protocol}, {id: 3, dst: "c:3", proto: http1.Protocol}}
	var ar arena
	var calls []*call
	const n = 150
	for i := range n {
		c := &call{oc: conns[i*7%len(conns)], start: int64(i * 37 % 50), end: int64(1000 + i)}
		c.req.add([]byte(fmt.Sprintf("req-%d", i)), -1, &ar)
		calls = append(calls, c)
	}
	out := snapshotCalls(calls, 5)
	require.Len(t, out, n)
	seen := map[string]bool{}
	for i, c := range out {
		assert.Equal(t, i, c.Seq)
		if i > 0 {
			assert.LessOrEqual(t, out[i-1].StartNs, c.StartNs, "call %d", i)
		}
		var k int
		_, err := fmt.Sscanf(string(c.Request), "req-%d", &k)
		require.NoError(t, err)
		oc := calls[k].oc
		assert.Equal(t, int64(oc.id), c.Conn, "call %d", k)
		assert.Equal(t, oc.dst, c.Dst)
		assert.Equal(t, oc.proto.Name(), c.Proto)
		assert.Equal(t, calls[k].start-5, c.StartNs)
		assert.Equal(t, calls[k].end-calls[k].start, c.DurNs)
		seen[string(c.Request)] = true
		if i > 0 && out[i-1].StartNs == c.StartNs {
			var prev int
			_, _ = fmt.Sscanf(string(out[i-1].Request), "req-%d", &prev)
			assert.Less(t, prev, k, "equal starts keep their order")
		}
	}
	assert.Len(t, seen, n)
}

// The fields every report reads sit in the first cache line of their
// objects, which start on one: sizes that are multiples of 64 get size
// classes whose objects are 64-byte aligned.
func TestHotFieldsInOneLine(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("layout of 64-bit platforms")
	}
	assert.Zero(t, unsafe.Sizeof(active{})%64, "active size")
	assert.LessOrEqual(t, unsafe.Offsetof(active{}.calls)+unsafe.Sizeof([]*call{}), uintptr(64), "active's hot fields")
	assert.Zero(t, unsafe.Sizeof(outConn{})%64, "outConn size")
	assert.LessOrEqual(t, unsafe.Offsetof(outConn{}.sess)+8, uintptr(64), "outConn's hot fields")
}

// Two requests of one distributed trace, one after the other on the same
// connections: each session gets its own call and its own id.
func TestTraceIDReusedAfterItsSessionEnded(t *testing.T) {
	r, out := newTestRecorder(t, 1, -1)
	const tp = "4bf92f3577b34da6a3ce929d0e0e4736"
	cmd := func(i int) string { return fmt.Sprintf("*2\r\n$3\r\nGET\r\n$1\r\n%d\r\n", i) }
	rep := func(i int) string { return fmt.Sprintf("$1\r\n%d\r\n", i) }
	for i := range 2 {
		tid := request(t, r, inConn, trace.RequestHead{TraceParent: tp}, func(tid string) {
			r.OutboundWrite(rdConn, tid, []byte(cmd(i)))
			r.OutboundRead(rdConn, []byte(rep(i)))
		})
		require.NotEqual(t, tp, tid)
	}
	settle(t, r)
	out.mu.Lock()
	ss := slices.Clone(out.ss)
	out.mu.Unlock()
	require.Len(t, ss, 2)
	for i, s := range ss {
		assert.Equal(t, tp, s.Trace)
		assert.Equal(t, getReq, string(s.Inbound.Request))
		assert.Equal(t, okResp, string(s.Inbound.Response))
		assert.Equal(t, []string{fmt.Sprintf("redis %q → %q", cmd(i), rep(i))}, reqs(s), "session %d", i)
	}
}

// A ConnInfo holds the state of one kind of connection: reports of the
// other kind on it are ignored, not a panic of its Data.
func TestConnInfoOfTheOtherKind(t *testing.T) {
	r, _ := newTestRecorder(t, 1, -1)
	r.OutboundWrite(rdConn, "", []byte("*1\r\n$4\r\nPING\r\n"))
	assert.Empty(t, r.StartRequest(rdConn, trace.RequestHead{Method: "GET"}), "a dialled connection")
	tid := r.StartRequest(inConn, trace.RequestHead{Method: "GET"})
	require.NotEmpty(t, tid)
	assert.NotPanics(t, func() {
		r.OutboundWrite(inConn, tid, []byte("*1\r\n$4\r\nPING\r\n"))
		r.OutboundRead(inConn, []byte("+PONG\r\n"))
	}, "an accepted connection")
	r.InboundWrite(inConn, tid, []byte(okResp))
}

// TestRecorderKeepsRandomness: a session stores the randomness its request
// drew (seed, math draws per source, crypto draws in order), read when the
// session ends; a request the agent gave no randomness stores none.
func TestRecorderKeepsRandomness(t *testing.T) {
	r, out := newTestRecorder(t, 1, -1)
	rnd := trace.NewRecordRandom(77, true)
	tid := request(t, r, inConn, trace.RequestHead{}, func(tid string) {
		r.RandomStarted(inConn, tid, rnd)
		rnd.Uint64(trace.MathRandV2)
		rnd.Uint64(trace.MathRand)
		rnd.Uint64(trace.MathRand)
		rnd.Record([]byte{1, 2, 3})
		rnd.Record([]byte("uuid-bytes-16..."))
	})
	plain := request(t, r, inConn, trace.RequestHead{}, func(string) {})
	r.RandomStarted(inConn, "no-such-trace", rnd) // ignored
	settle(t, r)
	require.Equal(t, &recording.Random{Seed: 77, Math: 2, MathV2: 1, Crypto: [][]byte{{1, 2, 3}, []byte("uuid-bytes-16...")}},
		out.byID(tid).Random)
	require.Nil(t, out.byID(plain).Random)
}

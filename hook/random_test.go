package hook_test

import (
	crand "crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/big"
	mrand "math/rand"
	mrand2 "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gofrs "github.com/gofrs/uuid"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/agenttest"
	"github.com/retrace-dev/retrace/trace"
)

// drawn is what the random handler drew, and on which trace.
type drawn struct {
	Trace     string   `json:"trace"`
	Order     uint64   `json:"order"`      // crypto/rand.Read
	Ticket    uint64   `json:"ticket"`     // math/rand/v2, handler goroutine
	Jitter    int64    `json:"jitter"`     // math/rand, handler goroutine
	ChildV1   []int    `json:"child_v1"`   // math/rand, a child goroutine
	ChildV2   float64  `json:"child_v2"`   // math/rand/v2, a child goroutine
	UUID      string   `json:"uuid"`       // google/uuid (crypto/rand.Reader)
	ChildUUID string   `json:"child_uuid"` // google/uuid in a child goroutine
	Gofrs     string   `json:"gofrs"`      // gofrs/uuid (crypto/rand.Reader)
	Big       string   `json:"big"`        // crypto/rand.Int
	Text      string   `json:"text"`       // crypto/rand.Text
	TLS       []string `json:"tls,omitempty"`
}

// randomHandler draws from every source the agent replays, on the
// handler's goroutine and on a child, one after the other (draws of
// goroutines that race each other come in the order they run). With tlsURL
// it first makes an HTTPS request: the TLS handshake draws from
// crypto/rand inside crypto/tls.
func randomHandler(tlsClient *http.Client, tlsURL string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var d drawn
		d.Trace = trace.CurrentID()
		if tlsURL != "" {
			resp, err := tlsClient.Get(tlsURL)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			resp.Body.Close()
			d.TLS = append(d.TLS, resp.Status)
		}
		var b [8]byte
		crand.Read(b[:])
		d.Order = binary.BigEndian.Uint64(b[:])
		d.Ticket = mrand2.Uint64N(1_000_000)
		d.Jitter = mrand.Int63n(1000)
		d.UUID = uuid.NewString()
		n, _ := crand.Int(crand.Reader, big.NewInt(1<<40))
		d.Big = n.String()
		d.Text = crand.Text()
		d.Gofrs = gofrs.Must(gofrs.NewV4()).String()
		var wg sync.WaitGroup
		wg.Go(func() {
			d.ChildV1 = mrand.Perm(5)
			d.ChildV2 = mrand2.Float64()
			d.ChildUUID = uuid.NewString()
		})
		wg.Wait()
		json.NewEncoder(w).Encode(d)
	}
}

// randomRecorder is a Recorder that keeps each sampled request's
// randomness.
type randomRecorder struct {
	mu   sync.Mutex
	rand map[string]*trace.Random
}

func (r *randomRecorder) StartRequest(*hook.ConnInfo, trace.RequestHead) string { return trace.NewID() }
func (r *randomRecorder) InboundRead(*hook.ConnInfo, string, []byte)            {}
func (r *randomRecorder) InboundWrite(*hook.ConnInfo, string, []byte)           {}
func (r *randomRecorder) OutboundWrite(*hook.ConnInfo, string, []byte)          {}
func (r *randomRecorder) OutboundRead(*hook.ConnInfo, []byte)                   {}
func (r *randomRecorder) Closed(*hook.ConnInfo)                                 {}
func (r *randomRecorder) RandomStarted(_ *hook.ConnInfo, tid string, rnd *trace.Random) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rand == nil {
		r.rand = map[string]*trace.Random{}
	}
	r.rand[tid] = rnd
}

func (r *randomRecorder) of(tid string) *trace.Random {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rand[tid]
}

// divergenceMock is the mock server's side of trace.RandomDst: it notes
// each divergence by trace and acknowledges it.
type divergenceMock struct {
	addr string
	mu   sync.Mutex
	got  map[string][]trace.Divergence
}

func startDivergenceMock(t *testing.T) *divergenceMock {
	m := &divergenceMock{got: map[string][]trace.Divergence{}}
	m.addr = hook.ServeTCP(t, func(c net.Conn) {
		fr := trace.NewFrameReader(c, 0)
		for {
			h, p, err := fr.Next()
			if err != nil {
				return
			}
			if h.Dst != trace.RandomDst {
				t.Errorf("frame to %q on the divergence connection", h.Dst)
				return
			}
			if h.Len == 0 {
				continue
			}
			var d trace.Divergence
			if err := json.Unmarshal(p, &d); err != nil {
				t.Errorf("divergence frame %q: %v", p, err)
				return
			}
			m.mu.Lock()
			m.got[h.TID] = append(m.got[h.TID], d)
			m.mu.Unlock()
			c.Write([]byte("\n"))
		}
	})
	return m
}

func (m *divergenceMock) of(tid string) []trace.Divergence {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.got[tid]
}

// getDrawn sends one request with extra headers on a fresh connection
// (written with raw system calls: the agent strips Retrace-* headers from
// what this process writes through net.Conn) and decodes the answer.
func getDrawn(t *testing.T, addr string, headers ...string) drawn {
	t.Helper()
	rc, err := agenttest.DialRaw(addr)
	require.NoError(t, err)
	defer rc.Close()
	status, body, err := rc.Get("/draw", headers...)
	require.NoError(t, err)
	require.Equal(t, 200, status, "%s", body)
	var d drawn
	require.NoError(t, json.Unmarshal(body, &d))
	return d
}

// recorded is one recorded request: what it drew and what the recording
// keeps of its randomness.
type recorded struct {
	d     drawn
	seed  trace.ReplaySeed
	draws [][]byte
}

func (r recorded) headers(tid string) []string {
	return []string{"Retrace-Trace-Id: " + tid, "Retrace-Replay-Seed: " + r.seed.String(),
		"Retrace-Replay-Random: " + string(trace.AppendReplayRandom(nil, r.draws))}
}

// recordRandom serves randomHandler in record mode with mode and returns
// n recorded requests.
func recordRandom(t *testing.T, mode hook.RandomMode, n int, withTLS bool) []recorded {
	rec := &randomRecorder{}
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer tlsSrv.Close()
	tlsClient := tlsSrv.Client()
	tlsClient.Transport.(*http.Transport).TLSClientConfig.ClientSessionCache = nil
	defer tlsClient.CloseIdleConnections()
	url := ""
	if withTLS {
		url = tlsSrv.URL
	}
	undo, err := hook.Install(hook.Config{Mode: hook.Record, Recorder: rec, Random: mode, Logger: discardLogger()})
	require.NoError(t, err)
	defer undo()
	addr := serveHTTP(t, randomHandler(tlsClient, url))
	out := make([]recorded, n)
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() {
			d := getDrawn(t, addr)
			rnd := rec.of(d.Trace)
			if !assertNotNil(t, rnd, "no randomness for trace %s", d.Trace) {
				return
			}
			out[i] = recorded{d: d, seed: trace.ReplaySeed{Seed: rnd.Seed,
				Draws: &[2]uint64{rnd.MathDraws(trace.MathRand), rnd.MathDraws(trace.MathRandV2)}}, draws: rnd.Draws()}
		})
	}
	wg.Wait()
	return out
}

func assertNotNil(t *testing.T, v any, msg string, args ...any) bool {
	if v == (*trace.Random)(nil) {
		t.Errorf(msg, args...)
		return false
	}
	return true
}

// serveHTTP serves h with net/http on a loopback port until t ends.
func serveHTTP(t *testing.T, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return ln.Addr().String()
}

// TestRandomRecordReplay: with RETRACE_RANDOM=all, 200 requests recorded
// at once and then replayed at once, each under two trace ids (an alias
// of one recording replayed twice at the same time), get back every value
// they drew — math/rand, math/rand/v2, crypto/rand, google/uuid, on the
// handler's goroutine and a child — with no divergence; the test's own
// goroutine draws real randomness throughout.
func TestRandomRecordReplay(t *testing.T) {
	recs := recordRandom(t, hook.RandomAll, 200, false)
	seen := map[string]bool{}
	for _, r := range recs {
		require.Len(t, r.draws, 6, "crypto draws of %s: order, uuid, Int, Text, gofrs, child uuid", r.d.Trace) // Int draws once for 2^40
		require.False(t, seen[r.d.UUID], "uuid %s drawn twice", r.d.UUID)
		seen[r.d.UUID] = true
	}

	mock := startDivergenceMock(t)
	var stop func()
	addr, stop := serveHTTPStop(t, randomHandler(nil, ""))
	defer stop()
	undo, err := hook.Install(hook.Config{Mode: hook.Replay, MockAddr: mock.addr, Passthrough: []string{addr}, Random: hook.RandomAll, Logger: discardLogger()})
	require.NoError(t, err)
	defer undo()

	var wg sync.WaitGroup
	for i, r := range recs {
		for k := range 2 {
			wg.Go(func() {
				tid := fmt.Sprintf("replay-%d-%d", i, k)
				got := getDrawn(t, addr, r.headers(tid)...)
				want := r.d
				want.Trace = tid
				require.Equal(t, want, got)
				require.Empty(t, mock.of(tid))
			})
		}
	}
	a, b := mrand2.Uint64(), mrand2.Uint64()
	require.NotEqual(t, a, b)
	wg.Wait()
	require.Zero(t, hook.ReadStats().Diverged)
}

// TestRandomDivergence: a replay that draws more than its recording made,
// or with no recorded draws at all, gets real randomness from there on,
// and the agent reports where to the mock server, by source and draw.
func TestRandomDivergence(t *testing.T) {
	recs := recordRandom(t, hook.RandomAll, 1, false)
	r := recs[0]
	mock := startDivergenceMock(t)
	addr, stop := serveHTTPStop(t, randomHandler(nil, ""))
	defer stop()
	undo, err := hook.Install(hook.Config{Mode: hook.Replay, MockAddr: mock.addr, Passthrough: []string{addr}, Random: hook.RandomAll, Logger: discardLogger()})
	require.NoError(t, err)
	defer undo()

	short := r
	short.draws = r.draws[:2]                                           // order and uuid
	short.seed.Draws = &[2]uint64{r.seed.Draws[0] - 1, r.seed.Draws[1]} // the child's Perm draws once more
	got := getDrawn(t, addr, short.headers("short")...)
	require.Equal(t, r.d.Order, got.Order)
	require.Equal(t, r.d.UUID, got.UUID)
	require.Equal(t, r.d.Ticket, got.Ticket)
	require.NotEqual(t, r.d.Big+r.d.Text, got.Big+got.Text)
	require.Equal(t, []trace.Divergence{
		{Source: "crypto/rand", Draw: 3, Reason: "beyond the recording (2 draws recorded); real randomness"},
		{Source: "math/rand", Draw: int(r.seed.Draws[0]), Reason: fmt.Sprintf("beyond the recording (%d draws recorded); real randomness", r.seed.Draws[0]-1)},
	}, mock.of("short"))

	// a seed with no counts and no draws (a recording made with math):
	// math draws are not limited, every crypto/rand draw diverges, at the
	// first
	got = getDrawn(t, addr, "Retrace-Trace-Id: nocrypto", "Retrace-Replay-Seed: "+strconv.FormatUint(r.seed.Seed, 10))
	require.Equal(t, r.d.Ticket, got.Ticket)
	require.Equal(t, r.d.ChildV1, got.ChildV1)
	require.Equal(t, []trace.Divergence{{Source: "crypto/rand", Draw: 1, Reason: "beyond the recording (0 draws recorded); real randomness"}},
		mock.of("nocrypto"))

	// neither header: the recording says nothing of its randomness; real
	// randomness, nothing reported
	got = getDrawn(t, addr, "Retrace-Trace-Id: bare")
	require.NotEqual(t, r.d.Ticket, got.Ticket)
	require.Empty(t, mock.of("bare"))
}

// TestRandomMathOnly: with RETRACE_RANDOM=math the math values come back
// and the crypto ones do not (crypto/rand is not patched).
func TestRandomMathOnly(t *testing.T) {
	recs := recordRandom(t, hook.RandomMath, 1, false)
	r := recs[0]
	require.Empty(t, r.draws)
	addr, stop := serveHTTPStop(t, randomHandler(nil, ""))
	defer stop()
	undo, err := hook.Install(hook.Config{Mode: hook.Replay, MockAddr: "127.0.0.1:9", Passthrough: []string{addr}, Random: hook.RandomMath, Logger: discardLogger()})
	require.NoError(t, err)
	defer undo()
	require.NotContains(t, strings.Join(hook.ReadStats().Patched, " "), "crypto/rand")
	got := getDrawn(t, addr, r.headers("m")...)
	require.Equal(t, r.d.Ticket, got.Ticket)
	require.Equal(t, r.d.Jitter, got.Jitter)
	require.Equal(t, r.d.ChildV1, got.ChildV1)
	require.Equal(t, r.d.ChildV2, got.ChildV2)
	require.NotEqual(t, r.d.Order, got.Order)
	require.NotEqual(t, r.d.UUID, got.UUID)
}

// TestRandomTLSNotRecorded: a TLS handshake made inside a traced request
// (an HTTPS call of the handler, on a fresh connection each time) draws
// from crypto/rand inside crypto/tls: those draws are neither recorded nor
// taken from the recording, so the handshake keeps working in both modes
// and the request's own draws come back.
func TestRandomTLSNotRecorded(t *testing.T) {
	recs := recordRandom(t, hook.RandomAll, 4, true)
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer tlsSrv.Close()
	tlsClient := tlsSrv.Client()
	tr := tlsClient.Transport.(*http.Transport)
	tr.TLSClientConfig.ClientSessionCache = nil
	tr.DisableKeepAlives = true
	defer tlsClient.CloseIdleConnections()
	mock := startDivergenceMock(t)
	addr, stop := serveHTTPStop(t, randomHandler(tlsClient, tlsSrv.URL))
	defer stop()
	undo, err := hook.Install(hook.Config{Mode: hook.Replay, MockAddr: mock.addr,
		Passthrough: []string{addr, strings.TrimPrefix(tlsSrv.URL, "https://")}, Random: hook.RandomAll, Logger: discardLogger()})
	require.NoError(t, err)
	defer undo()
	for i, r := range recs {
		require.Len(t, r.draws, 6, "the handshake's draws were recorded")
		require.Equal(t, []string{"200 OK"}, r.d.TLS)
		tid := fmt.Sprintf("tls-%d", i)
		got := getDrawn(t, addr, r.headers(tid)...)
		want := r.d
		want.Trace = tid
		require.Equal(t, want, got)
		require.Empty(t, mock.of(tid))
	}
	_ = tls.VersionTLS13
}

// serveHTTPStop is serveHTTP with a stop function, for tests that must
// stop serving before their hooks are removed.
func serveHTTPStop(t *testing.T, h http.Handler) (string, func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	var once sync.Once
	stop := func() { once.Do(func() { srv.Close(); <-done }) }
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// BenchmarkRandomHandler serves a handler that draws 12 values from
// math/rand and math/rand/v2 (an order number, a ticket, a jitter, a
// shuffle of 8) to traced replayed requests, with RETRACE_RANDOM=off and
// =math in alternating slices of the same run, and reports the time per
// request of each and their ratio (math/off). One client, keep-alive.
func BenchmarkRandomHandler(b *testing.B) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var out [4]int
		out[0] = mrand2.IntN(1_000_000)
		out[1] = mrand.Intn(1000)
		out[2] = int(mrand2.Float64() * 100)
		out[3] = mrand.Perm(8)[0]
		fmt.Fprintf(w, "%v", out)
	})
	const slices = 8
	var took [2]time.Duration
	var served [2]int
	for s := range slices {
		for side, mode := range []hook.RandomMode{hook.RandomOff, hook.RandomMath} {
			n := b.N / slices
			if s == 0 {
				n++ // at least one request per side
			}
			func() {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(b, err)
				undo, err := hook.Install(hook.Config{Mode: hook.Replay, MockAddr: "127.0.0.1:9", Passthrough: []string{ln.Addr().String()},
					Random: mode, NoClock: true, Logger: discardLogger()})
				require.NoError(b, err)
				srv := &http.Server{Handler: handler}
				done := make(chan struct{})
				go func() { defer close(done); srv.Serve(ln) }()
				rc, err := agenttest.DialRaw(ln.Addr().String())
				require.NoError(b, err)
				start := time.Now()
				for i := range n {
					if _, _, err := rc.Get("/", fmt.Sprintf("Retrace-Trace-Id: bench-%d", i), "Retrace-Replay-Seed: 12345"); err != nil {
						b.Fatal(err)
					}
				}
				took[side] += time.Since(start)
				served[side] += n
				rc.Close()
				srv.Close()
				<-done
				undo()
			}()
		}
	}
	off := float64(took[0]) / float64(served[0])
	math := float64(took[1]) / float64(served[1])
	b.ReportMetric(off, "ns/req-off")
	b.ReportMetric(math, "ns/req-math")
	b.ReportMetric(math/off, "math/off")
}

// TestRandomFailsOpen: a panic inside a random double (here, in the
// divergence callback) is recovered and counted, and the draw gets real
// randomness: the application never sees it.
func TestRandomFailsOpen(t *testing.T) {
	install(t, hook.Config{Mode: hook.Record, Recorder: &randomRecorder{}, Random: hook.RandomAll, Logger: discardLogger()})
	r := trace.NewReplayRandom(&trace.ReplaySeed{Seed: 1, Draws: &[2]uint64{0, 0}}, nil, true)
	r.OnDiverge = func(string, trace.Divergence) { panic("boom") }
	defer trace.Bind(&trace.Trace{ID: "p", Random: r})()
	before := hook.ReadStats().Failures
	var b [8]byte
	_, err := crand.Read(b[:])
	require.NoError(t, err)
	require.NotEqual(t, [8]byte{}, b)
	require.NotEqual(t, mrand2.Uint64(), mrand2.Uint64())
	require.EqualValues(t, 2, hook.ReadStats().Failures-before, "one per source")
}

package hook_test

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/agenttest"
	"github.com/retrace-dev/retrace/trace"
)

// tagServer answers every line with its tag and the line, and counts its
// connections: which server a connection reached shows in the answer.
type tagServer struct {
	addr  string
	ln    net.Listener
	conns atomic.Int64
	wg    sync.WaitGroup
}

func newTagServer(t *testing.T, tag string) *tagServer {
	t.Helper()
	return newTagServerAt(t, tag, "127.0.0.1:0")
}

func newTagServerAt(t *testing.T, tag, addr string) *tagServer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	s := &tagServer{addr: ln.Addr().String(), ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			s.wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(tag + " " + line)); err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

// destMock is a mock server that reads the agent's frames, notes each
// connection's destination (from its preamble) and answers each payload
// line with "mock DST LINE".
type destMock struct {
	addr string
	ln   net.Listener
	mu   sync.Mutex
	dsts []string
	wg   sync.WaitGroup
}

func newDestMock(t *testing.T) *destMock {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	m := &destMock{addr: ln.Addr().String(), ln: ln}
	var open sync.Map
	m.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			open.Store(c, true)
			m.wg.Go(func() {
				defer c.Close()
				fr := trace.NewFrameReader(c, 0)
				h, _, err := fr.Next()
				if err != nil {
					return
				}
				m.mu.Lock()
				m.dsts = append(m.dsts, h.Dst)
				m.mu.Unlock()
				for {
					h, p, err := fr.Next()
					if err != nil {
						return
					}
					if _, err := c.Write([]byte("mock " + h.Dst + " " + string(p))); err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		open.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
		m.wg.Wait()
	})
	return m
}

func (m *destMock) seen() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.dsts...)
}

// ask dials addr the usual way (net.Dialer, names resolved by net), sends
// one line and returns the answer.
func ask(t *testing.T, addr, line string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	require.NoError(t, err, "dialling %s", addr)
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Write([]byte(line + "\n"))
	require.NoError(t, err)
	got, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err, "answer from %s", addr)
	return strings.TrimSuffix(got, "\n")
}

// failingResolver points net.DefaultResolver at nothing for the test and
// counts the lookups that reached it: a name the agent sends to the mock
// unresolved must cost no lookup.
func failingResolver(t *testing.T) *atomic.Int64 {
	var n atomic.Int64
	r := net.DefaultResolver
	prefer, dial := r.PreferGo, r.Dial
	r.PreferGo = true
	r.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		n.Add(1)
		return nil, &net.OpError{Op: "dial", Net: network, Err: net.UnknownNetworkError("no DNS in this test")}
	}
	t.Cleanup(func() { r.PreferGo, r.Dial = prefer, dial })
	return &n
}

// TestBaffleAndRewrite: with RETRACE_BAFFLE set only the baffled
// destinations reach the mock (by address, by CIDR, by a name that
// resolves nowhere); a rewritten destination's connections reach its
// shadow, unframed; everything else goes where it was dialled. The real
// baffled and rewritten servers receive nothing.
func TestBaffleAndRewrite(t *testing.T) {
	baffled, prod, shadow, other := newTagServer(t, "pricing"), newTagServer(t, "prod-db"), newTagServer(t, "shadow-db"), newTagServer(t, "other")
	mock := newDestMock(t)
	lookups := failingResolver(t)
	_, otherPort, _ := net.SplitHostPort(other.addr)
	undo, err := hook.Install(hook.Config{Mode: hook.Replay, MockAddr: mock.addr, NoClock: true,
		Baffle:  []string{baffled.addr, "pricing.prod.invalid:8081", "127.0.0.2/32"},
		Rewrite: map[string]string{prod.addr: shadow.addr, "orders-db.prod.invalid:3306": shadow.addr}})
	require.NoError(t, err)
	defer undo()

	require.Equal(t, "mock "+baffled.addr+" PING a", ask(t, baffled.addr, "PING a"))
	require.Equal(t, "mock pricing.prod.invalid:8081 PING b", ask(t, "pricing.prod.invalid:8081", "PING b"))
	require.Equal(t, "mock 127.0.0.2:"+otherPort+" PING c", ask(t, "127.0.0.2:"+otherPort, "PING c"))
	require.Equal(t, "shadow-db PING d", ask(t, prod.addr, "PING d"))
	require.Equal(t, "shadow-db PING e", ask(t, "orders-db.prod.invalid:3306", "PING e"))
	require.Equal(t, "other PING f", ask(t, other.addr, "PING f"))

	require.Zero(t, baffled.conns.Load(), "the baffled server was reached")
	require.Zero(t, prod.conns.Load(), "the rewritten server was reached")
	require.EqualValues(t, 2, shadow.conns.Load())
	require.EqualValues(t, 1, other.conns.Load())
	require.ElementsMatch(t, []string{baffled.addr, "pricing.prod.invalid:8081", "127.0.0.2:" + otherPort}, mock.seen())
	require.Zero(t, lookups.Load(), "names routed by the rules were looked up")
	st := hook.ReadStats()
	require.GreaterOrEqual(t, st.RewrittenConnects, int64(2))
}

// TestNamedDialUnresolved: with every destination going to the mock (no
// RETRACE_BAFFLE), a host name is never looked up; the mock learns the
// name as dialled. RETRACE_PASSTHROUGH by name and by range keeps those
// destinations real.
func TestNamedDialUnresolved(t *testing.T) {
	direct := newTagServer(t, "direct")
	mock := newDestMock(t)
	lookups := failingResolver(t)
	_, port, _ := net.SplitHostPort(direct.addr)
	undo, err := hook.Install(hook.Config{Mode: hook.Replay, MockAddr: mock.addr, NoClock: true,
		Passthrough: []string{"127.0.0.3/32", "localhost:" + port}})
	require.NoError(t, err)
	defer undo()

	for _, c := range []struct{ dial, dst string }{
		{"mysql-primary.prod.svc:3306", "mysql-primary.prod.svc:3306"},
		{"MySQL-Primary.prod.svc.:3306", "mysql-primary.prod.svc:3306"},
		{"cache.prod.svc:6379", "cache.prod.svc:6379"},
	} {
		require.Equal(t, "mock "+c.dst+" PING x", ask(t, c.dial, "PING x"))
	}
	require.Zero(t, lookups.Load())
	require.Equal(t, []string{"mysql-primary.prod.svc:3306", "mysql-primary.prod.svc:3306", "cache.prod.svc:6379"}, mock.seen())

	ranged := newTagServerAt(t, "ranged", "127.0.0.3:0")
	require.Equal(t, "ranged PING r", ask(t, ranged.addr, "PING r"))
	require.Equal(t, "direct PING l", ask(t, "localhost:"+port, "PING l"))
	// a loopback name is routed by its address: 127.0.0.1 is no
	// pass-through destination at this port, so it goes to the mock
	loop := newTagServer(t, "loop")
	_, loopPort, _ := net.SplitHostPort(loop.addr)
	got := ask(t, "localhost:"+loopPort, "PING m")
	require.True(t, got == "mock 127.0.0.1:"+loopPort+" PING m" || got == "mock [::1]:"+loopPort+" PING m", got)
	require.Len(t, mock.seen(), 4, "a pass-through destination went to the mock")
}

// TestRecordDialledName: record mode reports an outbound connection
// dialled by name with the name as dialled (ConnInfo.Host) and the
// address it resolved to (Remote), resolved through a real DNS server.
func TestRecordDialledName(t *testing.T) {
	srv := newTagServer(t, "svc")
	_, port, _ := net.SplitHostPort(srv.addr)
	dns := agenttest.NewDNSServer(t, map[string]string{"svc.retrace.test": "127.0.0.1"})
	agenttest.UseDNS(t, dns)
	rec := &hostRecorder{}
	undo, err := hook.Install(hook.Config{Mode: hook.Record, Recorder: rec})
	require.NoError(t, err)
	defer undo()
	require.Equal(t, "svc PING n", ask(t, "svc.retrace.test:"+port, "PING n"))
	require.Equal(t, "svc PING a", ask(t, srv.addr, "PING a"))
	require.Positive(t, dns.Queries())
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Equal(t, map[string]string{srv.addr: "svc.retrace.test:" + port}, rec.hosts)
	require.Equal(t, 2, rec.conns)
}

// hostRecorder notes the Host of every outbound connection written on.
type hostRecorder struct {
	nopRecorderT
	mu    sync.Mutex
	conns int
	hosts map[string]string
	seen  map[uint64]bool
}

func (r *hostRecorder) OutboundWrite(c *hook.ConnInfo, tid string, p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen, r.hosts = map[uint64]bool{}, map[string]string{}
	}
	if r.seen[c.ID] {
		return
	}
	r.seen[c.ID] = true
	r.conns++
	if c.Host != "" {
		r.hosts[c.Remote] = c.Host
	}
}

type nopRecorderT struct{}

func (nopRecorderT) StartRequest(*hook.ConnInfo, trace.RequestHead) string { return "" }
func (nopRecorderT) InboundRead(*hook.ConnInfo, string, []byte)            {}
func (nopRecorderT) InboundWrite(*hook.ConnInfo, string, []byte)           {}
func (nopRecorderT) OutboundWrite(*hook.ConnInfo, string, []byte)          {}
func (nopRecorderT) OutboundRead(*hook.ConnInfo, []byte)                   {}
func (nopRecorderT) Closed(*hook.ConnInfo)                                 {}

// TestMockUnreachableSaidOnce: in replay mode with no mock listening, the
// agent says so once at the default log level, naming the mock's address;
// the application's dials fail as they would.
func TestMockUnreachableSaidOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	mockAddr := ln.Addr().String()
	ln.Close() // nothing listens there now
	var logs bytes.Buffer
	var mu sync.Mutex
	undo, err := hook.Install(hook.Config{Mode: hook.Replay, MockAddr: mockAddr, NoClock: true,
		Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelError}))})
	require.NoError(t, err)
	defer undo()
	for range 3 {
		_, err := net.DialTimeout("tcp", "10.99.0.1:3306", 2*time.Second)
		require.Error(t, err)
		_, err = net.DialTimeout("tcp", "db.prod.invalid:3306", 2*time.Second)
		require.Error(t, err)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, strings.Count(logs.String(), "cannot reach the mock server"), logs.String())
	require.Contains(t, logs.String(), "mock="+mockAddr)
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestRecordDialledNameFromHostsFile: a name resolved from /etc/hosts
// (net holds its IPv4 address in 16 bytes) is named too.
func TestRecordDialledNameFromHostsFile(t *testing.T) {
	srv := newTagServer(t, "svc")
	_, port, _ := net.SplitHostPort(srv.addr)
	addrs, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip4", "localhost")
	if err != nil || len(addrs) == 0 || addrs[0].Unmap().String() != "127.0.0.1" {
		t.Skipf("localhost does not resolve to 127.0.0.1 first here (%v %v)", addrs, err)
	}
	rec := &hostRecorder{}
	undo, err := hook.Install(hook.Config{Mode: hook.Record, Recorder: rec})
	require.NoError(t, err)
	defer undo()
	var d net.Dialer
	c, err := d.DialContext(context.Background(), "tcp4", "localhost:"+port)
	require.NoError(t, err)
	_, err = c.Write([]byte("PING h\n"))
	require.NoError(t, err)
	c.Close()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Equal(t, map[string]string{srv.addr: "localhost:" + port}, rec.hosts)
}

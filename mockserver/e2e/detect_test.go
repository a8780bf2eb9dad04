package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/agenttest"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/recording/capture"
	"github.com/retrace-dev/retrace/trace"
)

// Text protocols that a detector which guesses takes for HTTP (an
// upper-case word and a space) or for Redis: each is recorded under the
// real agent from a service that calls it on a pool of connections from a
// request's handler, a child goroutine and a grandchild, 32 requests at a
// time; then the downstream is stopped and the requests are replayed
// through the agent against the mock server. Before the protocols were
// detected without guessing, the line protocol was recorded as "http",
// the mock server waited for an HTTP head that never came, and every
// replayed request timed out.

const detectClients = 32

// textProto is one protocol under test: what a call sends and how its
// answer ends.
type textProto struct {
	name string
	// request is the n-th call of request i (n: 0 handler, 1 child, 2
	// grandchild).
	request func(i, n int) string
	// readAnswer reads one answer.
	readAnswer func(br *bufio.Reader) (string, error)
	// wantProto is the protocol the calls must be recorded as.
	wantProto string
}

func readLine(br *bufio.Reader) (string, error) { return br.ReadString('\n') }

// readRESP reads one RESP simple string, error, integer or bulk string.
func readRESP(br *bufio.Reader) (string, error) {
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "$") {
		return line, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 0 {
		return line, err
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(br, body); err != nil {
		return "", err
	}
	return line + string(body), nil
}

// textServer answers every line with answer(line), on real TCP.
type textServer struct {
	ln net.Listener
	wg sync.WaitGroup
	mu sync.Mutex
	cs map[net.Conn]bool
}

func startTextServer(t *testing.T, answer func(line string) string) *textServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &textServer{ln: ln, cs: map[net.Conn]bool{}}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.cs[c] = true
			s.mu.Unlock()
			s.wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, answer(line)); err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(s.close)
	return s
}

func (s *textServer) addr() string { return s.ln.Addr().String() }

// startForwarder is a server that relays every connection to target: a
// downstream that can be stopped in front of a shared real one.
func startForwarder(t *testing.T, target string) *textServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &textServer{ln: ln, cs: map[net.Conn]bool{}}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			s.mu.Lock()
			s.cs[c], s.cs[up] = true, true
			s.mu.Unlock()
			s.wg.Go(func() { io.Copy(up, c); up.Close() })
			s.wg.Go(func() { io.Copy(c, up); c.Close() })
		}
	})
	t.Cleanup(s.close)
	return s
}

// close stops the server and ends its connections: the downstream is gone.
// Closing twice is harmless.
func (s *textServer) close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.cs {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// connPool is a client pool like a driver's: a call takes an idle
// connection (or dials one), writes and reads on the caller's goroutine,
// and puts it back.
type connPool struct {
	addr string
	read func(*bufio.Reader) (string, error)
	mu   sync.Mutex
	idle []*bufConn
}

type bufConn struct {
	net.Conn
	br *bufio.Reader
}

func (p *connPool) call(req string) (string, error) {
	p.mu.Lock()
	var c *bufConn
	if n := len(p.idle); n > 0 {
		c, p.idle = p.idle[n-1], p.idle[:n-1]
	}
	p.mu.Unlock()
	if c == nil {
		nc, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
		if err != nil {
			return "", err
		}
		c = &bufConn{Conn: nc, br: bufio.NewReader(nc)}
	}
	c.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		c.Close()
		return "", err
	}
	ans, err := p.read(c.br)
	if err != nil {
		c.Close()
		return "", fmt.Errorf("answer to %q: %w", req, err)
	}
	p.mu.Lock()
	p.idle = append(p.idle, c)
	p.mu.Unlock()
	return ans, nil
}

func (p *connPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.idle {
		c.Close()
	}
	p.idle = nil
}

// textService serves GET /work?i=N: a call from the handler, then one from
// a child goroutine, then one from the child's child, each waiting for the
// one it spawned; the body joins the three answers.
func textService(tp textProto, pool *connPool) *http.Server {
	return &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(r.URL.Query().Get("i"))
		answers := make([]string, 3)
		errs := make([]error, 3)
		var level func(n int)
		level = func(n int) {
			answers[n], errs[n] = pool.call(tp.request(i, n))
			if n < 2 && errs[n] == nil {
				var wg sync.WaitGroup
				wg.Go(func() { level(n + 1) })
				wg.Wait()
			}
		}
		level(0)
		if err := errors.Join(errs...); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		io.WriteString(w, strings.Join(answers, "|"))
	})}
}

// driveText sends request i with the extra header hdr(i) from
// detectClients concurrent clients and returns the bodies. It fails the
// test when the requests take more than a minute (a replay that hangs).
func driveText(t *testing.T, addr string, hdr func(i int) string) []string {
	got := make([]string, detectClients)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for i := range detectClients {
			wg.Go(func() {
				rc, err := agenttest.DialRaw(addr)
				if err != nil {
					got[i] = err.Error()
					return
				}
				defer rc.Close()
				code, body, err := rc.Get(fmt.Sprintf("/work?i=%d", i), hdr(i))
				if err != nil || code != 200 {
					got[i] = fmt.Sprintf("status %d: %s %v", code, body, err)
					return
				}
				got[i] = string(body)
			})
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%d requests not answered within a minute", detectClients)
	}
	return got
}

// recordReplayText records the service calling a downstream at dst under
// the agent, stops the downstream (stop), and replays every request
// through the agent against the mock server loaded from the recording.
func recordReplayText(t *testing.T, tp textProto, dst string, stop func()) {
	ctx := context.Background()
	tids := make([]string, detectClients)
	for i := range tids {
		tids[i] = trace.NewID()
	}
	dir := t.TempDir()
	store, err := recording.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	sampler, _ := recording.NewSampler(1)
	pipe, err := recording.NewPipeline(recording.PipelineConfig{Store: store, Sampler: sampler})
	if err != nil {
		t.Fatal(err)
	}
	recorder, err := capture.New(capture.Config{Pipeline: pipe, App: "detect-" + tp.name})
	if err != nil {
		t.Fatal(err)
	}

	// Record.
	sutLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	undo, err := hook.Install(hook.Config{Mode: hook.Record, Recorder: recorder})
	if err != nil {
		t.Fatalf("installing the agent: %v", err)
	}
	pool := &connPool{addr: dst, read: tp.readAnswer}
	sut := textService(tp, pool)
	var serveWG sync.WaitGroup
	serveWG.Go(func() { sut.Serve(sutLn) })
	want := driveText(t, sutLn.Addr().String(), func(i int) string {
		return fmt.Sprintf("traceparent: 00-%s-%016x-01", tids[i], i+1)
	})
	sut.Close()
	serveWG.Wait()
	pool.close()
	undo()
	if err := recorder.Close(ctx); err != nil {
		t.Fatal(err)
	}
	stop()
	for i, w := range want {
		if strings.Count(w, "|") != 2 {
			t.Fatalf("recording request %d: %s", i, w)
		}
	}

	// The recording: every call to the downstream has the protocol it
	// speaks, and each request's three calls are in its session.
	srv := mocktest.NewServer(t, mockserver.Config{})
	rd, err := recording.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	n, err := srv.Load(ctx, func(ctx context.Context, fn func(*recording.Session) error) error {
		return rd.Scan(ctx, func(s *recording.Session) error {
			for _, c := range s.Calls {
				if c.Dst == dst {
					if c.Proto != tp.wantProto {
						t.Errorf("session %s: call %d %q recorded as %q, want %q", s.ID, c.Seq, c.Request, c.Proto, tp.wantProto)
					}
					if !c.Setup {
						calls[s.ID]++
					}
				}
			}
			return fn(s)
		})
	})
	rd.Close()
	if err != nil || n != detectClients {
		t.Fatalf("loaded %d sessions (%v), want %d", n, err, detectClients)
	}
	for _, id := range tids {
		if calls[id] != 3 {
			t.Errorf("session %s has %d calls to %s, want 3", id, calls[id], dst)
		}
	}
	if t.Failed() {
		return
	}

	// Replay, the downstream stopped.
	sutLn, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	undo, err = hook.Install(hook.Config{Mode: hook.Replay, MockAddr: srv.Addr(), NoClock: true,
		Passthrough: []string{sutLn.Addr().String(), strings.TrimPrefix(srv.AdminURL(), "http://")}})
	if err != nil {
		t.Fatalf("installing the agent: %v", err)
	}
	pool = &connPool{addr: dst, read: tp.readAnswer}
	sut = textService(tp, pool)
	serveWG.Go(func() { sut.Serve(sutLn) })
	got := driveText(t, sutLn.Addr().String(), func(i int) string { return "Retrace-Trace-Id: " + tids[i] })
	sut.Close()
	serveWG.Wait()
	pool.close()
	undo()
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d: replay answered %q, recorded %q", i, got[i], want[i])
		}
	}
	resp, err := http.Get(srv.AdminURL() + "/missing")
	if err != nil {
		t.Fatal(err)
	}
	var missing []mockserver.MissingMock
	err = json.NewDecoder(resp.Body).Decode(&missing)
	resp.Body.Close()
	if err != nil || len(missing) != 0 {
		t.Errorf("missing mocks: %+v %v", missing, err)
	}
}

// TestRawLineProtocolLikeHTTP: "GET <key> <tag>\n" starts like an HTTP
// request line, and is raw.
func TestRawLineProtocolLikeHTTP(t *testing.T) {
	nonce := trace.NewID()[:8]
	s := startTextServer(t, func(line string) string {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "GET" {
			return "ERR bad request\n"
		}
		return fmt.Sprintf("VALUE %s %s %s\n", f[1], f[2], trace.NewID()[:8])
	})
	recordReplayText(t, textProto{name: "line", wantProto: "raw", readAnswer: readLine,
		request: func(i, n int) string { return fmt.Sprintf("GET key:%s:%d:%d tag%d\n", nonce, i, n, n) }}, s.addr(), s.close)
}

// TestTextProtocolHELO: SMTP/POP3-like commands ("HELO x", "USER x") are
// raw: neither HTTP nor Redis.
func TestTextProtocolHELO(t *testing.T) {
	s := startTextServer(t, func(line string) string {
		verb, arg, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch verb {
		case "HELO":
			return "250 hello " + arg + " " + trace.NewID()[:6] + "\r\n"
		case "USER":
			return "331 user " + arg + " ok " + trace.NewID()[:6] + "\r\n"
		case "PASS":
			return "230 logged in " + trace.NewID()[:6] + "\r\n"
		}
		return "500 what\r\n"
	})
	verbs := []string{"HELO", "USER", "PASS"}
	recordReplayText(t, textProto{name: "helo", wantProto: "raw", readAnswer: readLine,
		request: func(i, n int) string { return fmt.Sprintf("%s client%d\r\n", verbs[n], i) }}, s.addr(), s.close)
}

// TestRedisInlineCommands: inline commands ("PING\r\n", "GET k\r\n") to a
// real Redis are Redis.
func TestRedisInlineCommands(t *testing.T) {
	addr := testenv.RedisAddr(t)
	prefix := "retrace-inline-" + trace.NewID()[:8]
	// the values the requests read, set without the agent
	setup := &connPool{addr: addr, read: readRESP}
	for i := range detectClients {
		for n := 1; n < 3; n++ {
			if _, err := setup.call(fmt.Sprintf("SET %s:%d:%d v%d-%s\r\n", prefix, i, n, i, trace.NewID()[:6])); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		for i := range detectClients {
			setup.call(fmt.Sprintf("DEL %s:%d:1 %s:%d:2\r\n", prefix, i, prefix, i))
		}
		setup.close()
	})
	fw := startForwarder(t, addr)
	recordReplayText(t, textProto{name: "redis-inline", wantProto: "redis", readAnswer: readRESP,
		request: func(i, n int) string {
			if n == 0 {
				return "PING\r\n"
			}
			return fmt.Sprintf("GET %s:%d:%d\r\n", prefix, i, n)
		}}, fw.addr(), fw.close)
}

package e2e_test

import (
	"bufio"
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	mrand "math/rand"
	mrand2 "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/patches"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/replayer/regress"
)

// The orders service of the randomness tests runs as a child process (this
// test binary, TestOrdersService), under the agent configured from the
// environment by the blank import of patches, as in a service, so that the replayer and the
// downstreams of the test run unhooked in the parent.
const (
	envOrdersChild   = "RETRACE_E2E_ORDERS" // "1": be the service
	envOrdersDSN     = "RETRACE_E2E_ORDERS_DSN"
	envOrdersHTTP    = "RETRACE_E2E_ORDERS_HTTP"     // URL of the HTTP downstream
	envOrdersTLS     = "RETRACE_E2E_ORDERS_TLS"      // URL of the HTTPS downstream
	envOrdersTLSCert = "RETRACE_E2E_ORDERS_TLS_CERT" // its certificate, PEM
)

// order is what the service answers: every value it generated.
type order struct {
	Number string `json:"number"` // crypto/rand
	Ticket int    `json:"ticket"` // math/rand/v2
	UUID   string `json:"uuid"`   // google/uuid, on a child goroutine
	Jitter int    `json:"jitter"` // math/rand, on a child goroutine
	TLS    string `json:"tls"`    // status of the HTTPS downstream
}

// TestOrdersService is the child process: an HTTP service whose handler
// calls an HTTPS downstream (a fresh TLS handshake every time), generates
// an order number with crypto/rand, a ticket with math/rand/v2, then on a
// child goroutine a UUID (google/uuid) and a jitter (math/rand), INSERTs
// them into MariaDB and POSTs them to an HTTP downstream, and returns
// them. It prints its address, serves until its standard input closes,
// then stops the agent (flushing the recorder).
func TestOrdersService(t *testing.T) {
	if os.Getenv(envOrdersChild) != "1" {
		t.Skip("the service of TestRandomnessRecordReplay, run as its child")
	}
	// The agent is in place: patches, imported by this package, installed
	// it at init from the environment, as in any service.
	if err := patches.Err(); err != nil || hook.ReadStats().Mode == hook.Off {
		t.Fatalf("agent off: %v", err)
	}
	db, err := sql.Open("mysql", os.Getenv(envOrdersDSN))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(16)
	down := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	tlsDown := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   tlsConfigFor(t),
		DisableKeepAlives: true, // a handshake inside every request
	}}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var o order
		resp, err := tlsDown.Get(os.Getenv(envOrdersTLS) + "/ping")
		if err != nil {
			http.Error(w, "tls downstream: "+err.Error(), http.StatusBadGateway)
			return
		}
		resp.Body.Close()
		o.TLS = resp.Status
		var n [8]byte
		crand.Read(n[:])
		o.Number = "ORD-" + hex.EncodeToString(n[:])
		o.Ticket = mrand2.IntN(1_000_000)
		var wg sync.WaitGroup
		wg.Go(func() {
			o.UUID = uuid.NewString()
			o.Jitter = mrand.Intn(1000)
		})
		wg.Wait()
		if _, err := db.ExecContext(r.Context(), "INSERT INTO orders (number, ticket, uuid, jitter) VALUES (?, ?, ?, ?)",
			o.Number, o.Ticket, o.UUID, o.Jitter); err != nil {
			http.Error(w, "insert: "+err.Error(), http.StatusInternalServerError)
			return
		}
		body, _ := json.Marshal(o)
		resp, err = down.Post(os.Getenv(envOrdersHTTP)+"/notify", "application/json", strings.NewReader(string(body)))
		if err != nil {
			http.Error(w, "http downstream: "+err.Error(), http.StatusBadGateway)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("listening %s\n", ln.Addr())
	go srv.Serve(ln)
	io.Copy(io.Discard, os.Stdin)
	srv.Close()
	db.Close()
	down.CloseIdleConnections()
	if err := patches.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// tlsConfigFor trusts the certificate of the test's HTTPS downstream,
// which the parent passes in envOrdersTLSCert.
func tlsConfigFor(t *testing.T) *tls.Config {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(os.Getenv(envOrdersTLSCert))) {
		t.Fatalf("%s holds no certificate", envOrdersTLSCert)
	}
	return &tls.Config{RootCAs: pool}
}

// certPEM is the certificate of an httptest TLS server, PEM-encoded.
func certPEM(s *httptest.Server) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw}))
}

// ordersChild is a running service.
type ordersChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addr  string
	done  chan error
}

func startOrders(t *testing.T, env ...string) *ordersChild {
	t.Helper()
	cmd := testenv.SelfCommand("-test.run=^TestOrdersService$", "-test.count=1")
	cmd.Env = append(os.Environ(), append([]string{envOrdersChild + "=1"}, env...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &ordersChild{cmd: cmd, stdin: stdin, done: make(chan error, 1)}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
			c.addr = a
			break
		}
		t.Logf("service: %s", sc.Text())
	}
	go func() {
		io.Copy(io.Discard, stdout)
		c.done <- cmd.Wait()
	}()
	if c.addr == "" {
		stdin.Close()
		t.Fatalf("the service did not start: %v", <-c.done)
	}
	t.Cleanup(func() { c.stop(t) })
	return c
}

// stop closes the service's standard input and waits for it to end.
func (c *ordersChild) stop(t *testing.T) {
	if c.stdin == nil {
		return
	}
	c.stdin.Close()
	c.stdin = nil
	select {
	case err := <-c.done:
		if err != nil {
			t.Errorf("the service: %v", err)
		}
	case <-time.After(30 * time.Second):
		c.cmd.Process.Kill()
		t.Errorf("the service did not stop")
	}
}

// tcpProxy forwards connections to a real server until stopped, so that
// a test can take the real server away.
type tcpProxy struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]bool
}

func newTCPProxy(t *testing.T, to string) *tcpProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, conns: map[net.Conn]bool{}}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[up] = true, true
			p.mu.Unlock()
			p.wg.Go(func() { io.Copy(up, c); up.Close() })
			p.wg.Go(func() { io.Copy(c, up); c.Close() })
		}
	})
	t.Cleanup(p.stop)
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

// stop closes the listener and every connection, and waits.
func (p *tcpProxy) stop() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// randomStage is the world of one randomness test: MariaDB behind a
// proxy, an HTTP and an HTTPS downstream, a recordings directory.
type randomStage struct {
	dir         string
	db          *tcpProxy
	dsn         string
	http, https *httptest.Server
	notified    sync.Map // order number → body the HTTP downstream got
}

func newRandomStage(t *testing.T) *randomStage {
	st := &randomStage{dir: t.TempDir()}
	dbName := scratchDB(t)
	admin := openDB(t, nil, dbName)
	if _, err := admin.Exec("CREATE TABLE orders (number VARCHAR(32) PRIMARY KEY, ticket INT, uuid CHAR(36), jitter INT)"); err != nil {
		t.Fatal(err)
	}
	admin.Close()
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	st.db = newTCPProxy(t, cfg.Addr)
	cfg.Addr, cfg.DBName = st.db.addr(), dbName
	st.dsn = cfg.FormatDSN()
	st.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var o order
		json.Unmarshal(b, &o)
		st.notified.Store(o.Number, string(b))
		io.WriteString(w, "noted "+o.Number)
	}))
	t.Cleanup(st.http.Close)
	st.https = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "pong") }))
	t.Cleanup(st.https.Close)
	return st
}

func (st *randomStage) env(extra ...string) []string {
	return append([]string{
		envOrdersDSN + "=" + st.dsn,
		envOrdersHTTP + "=" + st.http.URL,
		envOrdersTLS + "=" + st.https.URL,
		envOrdersTLSCert + "=" + certPEM(st.https),
		"RETRACE_RECORD=" + st.dir,
		"RETRACE_APP=orders",
	}, extra...)
}

// record runs the service in record mode and sends it n requests from 64
// concurrent clients; it returns the answers.
func (st *randomStage) record(t *testing.T, random string, n int) []order {
	svc := startOrders(t, st.env("RETRACE_MODE=record", "RETRACE_RANDOM="+random)...)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer hc.CloseIdleConnections()
	out := make([]order, n)
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := range jobs {
				resp, err := hc.Post("http://"+svc.addr+"/orders", "application/json", strings.NewReader(`{"item":"book"}`))
				if err != nil {
					t.Errorf("recording request %d: %v", i, err)
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || json.Unmarshal(body, &out[i]) != nil {
					t.Errorf("recording request %d: %s %s", i, resp.Status, body)
				}
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	svc.stop(t)
	return out
}

// replay takes MariaDB and the HTTP downstream away, serves the
// recordings with the mock server (the HTTPS downstream too: the agent
// records its plaintext and replays it without TLS), runs the
// service in replay mode and replays every recorded request twice at once
// (two aliases of each recording) at concurrency 64, with no rules.
func (st *randomStage) replay(t *testing.T, random string) []*regress.Result {
	st.db.stop()
	st.http.Close()
	srv := mocktest.NewServer(t, mockserver.Config{})
	ctx := context.Background()
	rd, err := recording.Open(ctx, st.dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Load(ctx, rd.Scan); err != nil {
		t.Fatal(err)
	}
	rd.Close()
	svc := startOrders(t, st.env("RETRACE_MODE=replay", "RETRACE_RANDOM="+random, "RETRACE_MOCK_ADDR="+srv.Addr())...)
	src, err := regress.OpenSource(ctx, st.dir, func(err error) { t.Error(err) })
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var mu sync.Mutex
	var results []*regress.Result
	err = regress.Run(ctx, regress.Config{Source: src, Target: "http://" + svc.addr, MockAdmin: srv.AdminURL(),
		Concurrency: 64, Repeat: 2}, func(r *regress.Result) {
		mu.Lock()
		results = append(results, r)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	return results
}

const randomRequests = 128

// TestRandomnessRecordReplay: recorded with RETRACE_RANDOM=all under 64
// concurrent clients, 128 orders come back whole when replayed 256 times
// at once with MariaDB and the HTTP downstream gone and no rules file:
// every session passes, responses and downstream requests (the INSERT's
// parameters, the HTTP body) identical, while a TLS handshake inside
// every request (a fresh connection to the HTTPS downstream) keeps
// working in both modes.
func TestRandomnessRecordReplay(t *testing.T) {
	st := newRandomStage(t)
	orders := st.record(t, "all", randomRequests)
	numbers := map[string]bool{}
	for _, o := range orders {
		if o.TLS != "200 OK" || numbers[o.Number] {
			t.Fatalf("recorded %+v (numbers must differ)", o)
		}
		numbers[o.Number] = true
		if _, ok := st.notified.Load(o.Number); !ok {
			t.Fatalf("the HTTP downstream never got order %s", o.Number)
		}
	}
	results := st.replay(t, "all")
	if len(results) != 2*randomRequests {
		t.Fatalf("%d replays, want %d", len(results), 2*randomRequests)
	}
	for _, r := range results {
		if r.Status != regress.Passed {
			t.Errorf("session %s: %s %s %+v", r.Session, r.Status, r.Error, r.Findings)
		}
	}
}

// TestRandomnessMathOnly: recorded and replayed with RETRACE_RANDOM=math,
// the ticket and the jitter come back and the order number and UUID do
// not: every session fails on those (response and downstream) and on
// nothing else. Replayed with RETRACE_RANDOM=all, the agent also reports
// that the recording has no crypto draws: divergence at draw 1.
func TestRandomnessMathOnly(t *testing.T) {
	st := newRandomStage(t)
	st.record(t, "math", randomRequests/4)
	for _, mode := range []string{"math", "all"} {
		results := st.replay(t, mode)
		if len(results) != 2*randomRequests/4 {
			t.Fatalf("%s: %d replays, want %d", mode, len(results), 2*randomRequests/4)
		}
		for _, r := range results {
			if r.Status != regress.Failed {
				t.Errorf("%s: session %s: %s %s", mode, r.Session, r.Status, r.Error)
				continue
			}
			diverged := false
			for _, f := range r.Findings {
				l := f.Label()
				switch {
				case f.Where == regress.InRandom:
					diverged = true
					if f.Path != "crypto/rand[1]" {
						t.Errorf("%s: session %s diverged at %s: %s", mode, r.Session, f.Path, f.Note)
					}
				case strings.Contains(l, "number") || strings.Contains(l, "uuid") || strings.Contains(l, "params[0]") || strings.Contains(l, "params[2]"):
				case strings.Contains(l, "body") && f.Kind == "changed" && f.Where == regress.InDownstream:
					// the HTTP downstream's body, a JSON object: compared field by field
				default:
					t.Errorf("%s: session %s: unexpected finding %s (%s → %s)", mode, r.Session, l, f.Want, f.Got)
				}
				if strings.Contains(l, "ticket") || strings.Contains(l, "jitter") || strings.Contains(l, "params[1]") || strings.Contains(l, "params[3]") {
					t.Errorf("%s: session %s: a math value differs: %s", mode, r.Session, l)
				}
			}
			if diverged != (mode == "all") {
				t.Errorf("%s: session %s: divergence reported %v", mode, r.Session, diverged)
			}
		}
	}
}

package e2e_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-resty/resty/v2"
	"github.com/go-sql-driver/mysql"
	goredis "github.com/redis/go-redis/v9"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/agenttest"
	"github.com/retrace-dev/retrace/internal/certtest"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/recording/capture"
	"github.com/retrace-dev/retrace/replayer/regress"
	"github.com/retrace-dev/retrace/trace"
)

// tlsTraces is how many requests the TLS tests send at once.
const tlsTraces = 64

// recorded is what a record run left: the store's directory, the trace id
// of each request and its answer.
type recorded struct {
	dir  string
	tids []string
	want []string
}

// recordRun serves handler under the agent in record mode, sends
// tlsTraces concurrent requests (request i with id i and traceparent
// tids[i]) and returns the recording.
func recordRun(t *testing.T, handler http.Handler, stop func()) recorded {
	t.Helper()
	ctx := context.Background()
	r := recorded{dir: t.TempDir(), tids: make([]string, tlsTraces)}
	for i := range r.tids {
		r.tids[i] = trace.NewID()
	}
	store, err := recording.Open(ctx, r.dir)
	if err != nil {
		t.Fatal(err)
	}
	sampler, _ := recording.NewSampler(1)
	pipe, err := recording.NewPipeline(recording.PipelineConfig{Store: store, Sampler: sampler})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := capture.New(capture.Config{Pipeline: pipe, App: "e2e-tls"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	undo, err := hook.Install(hook.Config{Mode: hook.Record, Recorder: rec})
	if err != nil {
		t.Fatalf("installing the agent: %v", err)
	}
	sut := &http.Server{Handler: handler}
	var wg sync.WaitGroup
	wg.Go(func() { sut.Serve(ln) })
	r.want = driveN(ln.Addr().String(), tlsTraces, func(i int) string {
		return fmt.Sprintf("traceparent: 00-%s-%016x-01", r.tids[i], i+1)
	})
	sut.Close()
	wg.Wait()
	stop()
	undo()
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

// driveN is drive for n requests.
func driveN(addr string, n int, hdr func(i int) string) []string {
	got := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
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
	return got
}

// sessions reads every session of the recording by the W3C trace id its
// request carried (the tids).
func (r recorded) sessions(t *testing.T) map[string]*recording.Session {
	t.Helper()
	rd, err := recording.Open(context.Background(), r.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	out := map[string]*recording.Session{}
	if err := rd.Scan(context.Background(), func(s *recording.Session) error {
		if s.Trace != "" {
			out[s.Trace] = s
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// replayRun loads the recording into a mock server and replays every
// request against handler under the agent in replay mode; every request
// must get its recorded answer, with no mock missing.
func replayRun(t *testing.T, r recorded, handler http.Handler, cleanup func()) {
	t.Helper()
	ctx := context.Background()
	srv := mocktest.NewServer(t, mockserver.Config{})
	rd, err := recording.Open(ctx, r.dir)
	if err != nil {
		t.Fatal(err)
	}
	n, err := srv.Load(ctx, rd.Scan)
	rd.Close()
	if err != nil || n < tlsTraces {
		t.Fatalf("loaded %d sessions (%v), want at least %d", n, err, tlsTraces)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	undo, err := hook.Install(hook.Config{Mode: hook.Replay, MockAddr: srv.Addr(), NoClock: true,
		Passthrough: []string{ln.Addr().String(), strings.TrimPrefix(srv.AdminURL(), "http://")}})
	if err != nil {
		t.Fatalf("installing the agent: %v", err)
	}
	sut := &http.Server{Handler: handler}
	var wg sync.WaitGroup
	wg.Go(func() { sut.Serve(ln) })
	sessions := r.sessions(t)
	got := driveN(ln.Addr().String(), tlsTraces, func(i int) string {
		if s := sessions[r.tids[i]]; s != nil {
			return "Retrace-Trace-Id: " + s.ID
		}
		return "Retrace-Trace-Id: none"
	})
	sut.Close()
	wg.Wait()
	cleanup()
	undo()
	for i := range tlsTraces {
		if got[i] != r.want[i] {
			t.Errorf("request %d: replay answered %q, recorded %q", i, got[i], r.want[i])
		}
	}
	if st := hook.ReadStats(); st.TLSHandshakes == 0 || t.Failed() {
		t.Errorf("no TLS handshake was completed without TLS in replay: %+v", st)
	}
}

// priceService calls an HTTPS pricing service for each request: with
// net/http from a child goroutine, with resty from that child's child, on
// pooled keep-alive connections shared by every request.
type priceService struct {
	base  string
	hc    *http.Client
	resty *resty.Client
}

func newPriceService(base string, cfg *tls.Config) *priceService {
	tr := &http.Transport{TLSClientConfig: cfg, MaxIdleConnsPerHost: 4}
	rtr := &http.Transport{TLSClientConfig: cfg.Clone(), MaxIdleConnsPerHost: 4}
	return &priceService{base: base, hc: &http.Client{Transport: tr, Timeout: 10 * time.Second},
		resty: resty.NewWithClient(&http.Client{Transport: rtr, Timeout: 10 * time.Second})}
}

func (p *priceService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i := r.URL.Query().Get("i")
	type res struct {
		s   string
		err error
	}
	out := make(chan res, 2)
	go func() {
		resp, err := p.hc.Get(p.base + "/price?item=" + i)
		if err != nil {
			out <- res{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		out <- res{s: string(b), err: err}
		go func() {
			rr, err := p.resty.R().SetQueryParam("item", i).Post(p.base + "/tax")
			if err != nil {
				out <- res{err: err}
				return
			}
			out <- res{s: rr.String()}
		}()
	}()
	var parts []string
	for range 2 {
		x := <-out
		if x.err != nil {
			http.Error(w, x.err.Error(), http.StatusBadGateway)
			return
		}
		parts = append(parts, x.s)
	}
	fmt.Fprint(w, strings.Join(parts, " | "))
}

func (p *priceService) close() {
	p.hc.CloseIdleConnections()
	p.resty.GetClient().CloseIdleConnections()
}

var itemRE = regexp.MustCompile(`item=(\d+)`)

// TestRecordAndReplayHTTPS: a service calling an HTTPS provider behind a
// private CA is recorded in plaintext, each call in its own request's
// session, and replayed with the provider gone and no CA anywhere.
func TestRecordAndReplayHTTPS(t *testing.T) {
	ca := certtest.New(t)
	provider := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s item=%s %s", r.URL.Path, r.URL.Query().Get("item"), trace.NewID()[:8])
	}))
	provider.TLS = ca.ServerConfig(t)
	provider.StartTLS()
	base := provider.URL
	cfg := ca.ClientConfig()
	cfg.NextProtos = []string{"http/1.1"}
	svc := newPriceService(base, cfg)
	rec := recordRun(t, svc, func() { svc.close(); provider.Close() })

	sessions := rec.sessions(t)
	for i, tid := range rec.tids {
		if !strings.Contains(rec.want[i], fmt.Sprintf("/price item=%d ", i)) ||
			!strings.Contains(rec.want[i], fmt.Sprintf("/tax item=%d ", i)) {
			t.Fatalf("recording request %d: %s", i, rec.want[i])
		}
		s := sessions[tid]
		if s == nil {
			t.Fatalf("request %d: no session %s", i, tid)
		}
		var https int
		for _, c := range s.Calls {
			if bytes.HasPrefix(c.Request, []byte{0x16, 0x03}) || bytes.HasPrefix(c.Response, []byte{0x16, 0x03}) {
				t.Errorf("request %d: a TLS record was recorded: call %d, %s to %s", i, c.Seq, c.Proto, c.Dst)
			}
			if c.Proto != recording.ProtoHTTP {
				continue
			}
			https++
			if !c.TLS.On || c.TLS.ALPN != "http/1.1" || c.TLS.ServerName != "127.0.0.1" {
				t.Errorf("request %d: call not marked TLS as negotiated: %+v", i, c.TLS)
			}
			if bytes.Contains(c.Request, []byte("Retrace-")) {
				t.Errorf("request %d: in-band header recorded: %q", i, c.Request)
			}
			for _, m := range itemRE.FindAllSubmatch(append(c.Request, c.Response...), -1) {
				if string(m[1]) != fmt.Sprint(i) {
					t.Errorf("request %d: call of item %s in its session: %q", i, m[1], c.Request)
				}
			}
		}
		if https != 2 {
			t.Errorf("request %d: %d HTTPS calls recorded, want 2: %+v", i, https, s.Calls)
		}
	}

	// replay: no CA given to the clients (they would refuse the provider's
	// certificate), the provider is gone
	svc = newPriceService(base, &tls.Config{})
	replayRun(t, rec, svc, svc.close)
}

// storeService keeps each request's item in Redis and reads a row of
// MariaDB, both over TLS (the servers accept nothing else).
type storeService struct {
	rdb    *goredis.Client
	db     *sql.DB
	prefix string
}

// caPool reads a CA's PEM file; an empty pool when file is "".
func caPool(t *testing.T, file string) *x509.CertPool {
	p := x509.NewCertPool()
	if file == "" {
		return p
	}
	pem, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !p.AppendCertsFromPEM(pem) {
		t.Fatalf("%s holds no certificate", file)
	}
	return p
}

var tlsConfigSeq int

// newStoreService connects to the TLS Redis and MariaDB, trusting the CA
// in caFile ("" trusts nothing: a connection that reached a real server
// would fail).
func newStoreService(t *testing.T, caFile, prefix string) *storeService {
	t.Helper()
	raddr, _ := testenv.RedisTLSAddr(t)
	dsn, _ := testenv.MySQLTLSDSN(t)
	host, _, _ := net.SplitHostPort(raddr)
	rdb := goredis.NewClient(&goredis.Options{Addr: raddr, PoolSize: 8, MaxRetries: -1,
		TLSConfig: &tls.Config{RootCAs: caPool(t, caFile), ServerName: host}})
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	tlsConfigSeq++
	name := fmt.Sprintf("retrace-e2e-tls-%d", tlsConfigSeq)
	if err := mysql.RegisterTLSConfig(name, &tls.Config{RootCAs: caPool(t, caFile), ServerName: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	cfg.TLSConfig = name
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	return &storeService{rdb: rdb, db: db, prefix: prefix}
}

func (s *storeService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	i := r.URL.Query().Get("i")
	key := s.prefix + ":" + i
	if err := s.rdb.Set(ctx, key, "item="+i, time.Minute).Err(); err != nil {
		http.Error(w, "redis: "+err.Error(), http.StatusBadGateway)
		return
	}
	v, err := s.rdb.Get(ctx, key).Result()
	if err != nil {
		http.Error(w, "redis: "+err.Error(), http.StatusBadGateway)
		return
	}
	var row string
	if err := s.db.QueryRowContext(ctx, "SELECT CONCAT('item=', ?, ' ', @@version_comment IS NOT NULL)", i).Scan(&row); err != nil {
		http.Error(w, "mysql: "+err.Error(), http.StatusBadGateway)
		return
	}
	fmt.Fprintf(w, "%s | %s", v, row)
}

func (s *storeService) close() {
	s.rdb.Close()
	s.db.Close()
}

// TestRecordAndReplayRedisAndMySQLOverTLS: go-redis to a TLS-only
// redis-server and go-sql-driver/mysql to a MariaDB that requires TLS
// (MySQL's SSL request, then the handshake mid-stream) are recorded as
// redis and mysql in plaintext, and replayed from the mock with clients
// that trust no CA, so no real server can have answered.
func TestRecordAndReplayRedisAndMySQLOverTLS(t *testing.T) {
	_, caFile := testenv.RedisTLSAddr(t)
	prefix := "retrace-e2e-tls-" + trace.NewID()[:8]
	svc := newStoreService(t, caFile, prefix)
	rec := recordRun(t, svc, svc.close)
	sessions := rec.sessions(t)
	for i, tid := range rec.tids {
		if rec.want[i] != fmt.Sprintf("item=%d | item=%d 1", i, i) {
			t.Fatalf("recording request %d: %s", i, rec.want[i])
		}
		s := sessions[tid]
		if s == nil {
			t.Fatalf("request %d: no session", i)
		}
		protos := map[string]int{}
		for _, c := range s.Calls {
			if bytes.HasPrefix(c.Request, []byte{0x16, 0x03}) {
				t.Errorf("request %d: a TLS record was recorded: call %d %s", i, c.Seq, c.Proto)
			}
			if c.Setup {
				continue
			}
			protos[c.Proto]++
			if !c.TLS.On {
				t.Errorf("request %d: call %d (%s) not marked TLS", i, c.Seq, c.Proto)
			}
			for _, m := range itemRE.FindAllSubmatch(c.Request, -1) {
				if string(m[1]) != fmt.Sprint(i) {
					t.Errorf("request %d: call of item %s in its session", i, m[1])
				}
			}
		}
		if protos[recording.ProtoRedis] < 2 || protos[recording.ProtoMySQL] < 1 {
			t.Errorf("request %d: calls by protocol %v, want 2 redis and a mysql", i, protos)
		}
	}
	svc = newStoreService(t, "", prefix)
	replayRun(t, rec, svc, svc.close)
}

// childEnv names the service a re-run of the test binary serves instead
// of running tests (see runChild): a service replayed by the replayer in
// another process, as in production, so that the replayer's own
// Retrace-* headers are not taken by the agent of the service.
const childEnv = "RETRACE_E2E_CHILD"

// runChild serves the child named: "https-sut" is priceService over
// HTTPS (certificate and key in RETRACE_E2E_CERT, _KEY) calling
// RETRACE_E2E_PROVIDER, under the agent in replay mode with the mock at
// RETRACE_E2E_MOCK. It prints its address and serves until its standard
// input closes.
func runChild(name string) int {
	if name != "https-sut" {
		fmt.Fprintf(os.Stderr, "unknown child %q\n", name)
		return 2
	}
	cert, err := tls.LoadX509KeyPair(os.Getenv("RETRACE_E2E_CERT"), os.Getenv("RETRACE_E2E_KEY"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	undo, err := hook.Install(hook.Config{Mode: hook.Replay, MockAddr: os.Getenv("RETRACE_E2E_MOCK"), NoClock: true,
		Passthrough: []string{ln.Addr().String()}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer undo()
	svc := newPriceService(os.Getenv("RETRACE_E2E_PROVIDER"), &tls.Config{}) // no CA
	srv := &http.Server{Handler: svc, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go srv.ServeTLS(ln, "", "")
	fmt.Println(ln.Addr().String())
	io.Copy(io.Discard, os.Stdin)
	srv.Close()
	svc.close()
	return 0
}

// TestRecordAndReplayHTTPSService: a service serving HTTPS is recorded
// from its plaintext (inbound requests marked TLS), then replayed by the
// replayer with --target https:// and the CA, against the service in
// another process under the agent in replay mode; its own HTTPS provider
// is gone by then and answered by the mock.
func TestRecordAndReplayHTTPSService(t *testing.T) {
	ctx := context.Background()
	ca := certtest.New(t)
	dir := t.TempDir()
	certFile, keyFile, err := ca.WriteLeaf(dir, "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	provider := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s item=%s %s", r.URL.Path, r.URL.Query().Get("item"), trace.NewID()[:8])
	}))
	provider.TLS = ca.ServerConfig(t)
	provider.StartTLS()
	base := provider.URL

	// record: the service serves HTTPS in this process
	rec := recorded{dir: t.TempDir(), tids: make([]string, tlsTraces), want: make([]string, tlsTraces)}
	store, err := recording.Open(ctx, rec.dir)
	if err != nil {
		t.Fatal(err)
	}
	sampler, _ := recording.NewSampler(1)
	pipe, err := recording.NewPipeline(recording.PipelineConfig{Store: store, Sampler: sampler})
	if err != nil {
		t.Fatal(err)
	}
	recorder, err := capture.New(capture.Config{Pipeline: pipe, App: "e2e-https"})
	if err != nil {
		t.Fatal(err)
	}
	undo, err := hook.Install(hook.Config{Mode: hook.Record, Recorder: recorder})
	if err != nil {
		t.Fatal(err)
	}
	svc := newPriceService(base, ca.ClientConfig())
	sut := httptest.NewUnstartedServer(svc)
	sut.TLS = ca.ServerConfig(t)
	sut.StartTLS()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientConfig()}}
	var wg sync.WaitGroup
	for i := range tlsTraces {
		rec.tids[i] = trace.NewID()
		wg.Go(func() {
			req, _ := http.NewRequest("GET", fmt.Sprintf("%s/work?i=%d", sut.URL, i), nil)
			req.Header.Set("traceparent", fmt.Sprintf("00-%s-%016x-01", rec.tids[i], i+1))
			resp, err := client.Do(req)
			if err != nil {
				rec.want[i] = err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			rec.want[i] = string(b)
		})
	}
	wg.Wait()
	client.CloseIdleConnections()
	sut.Close()
	svc.close()
	provider.Close()
	undo()
	if err := recorder.Close(ctx); err != nil {
		t.Fatal(err)
	}
	sessions := rec.sessions(t)
	ids := map[string]bool{}
	for i, tid := range rec.tids {
		s := sessions[tid]
		if s == nil || !strings.Contains(rec.want[i], fmt.Sprintf("item=%d ", i)) {
			t.Fatalf("request %d: answer %q, session %v", i, rec.want[i], s != nil)
		}
		if !s.Inbound.TLS.On || !bytes.HasPrefix(s.Inbound.Request, []byte("GET /work?i=")) {
			t.Fatalf("request %d: inbound not recorded as TLS plaintext: %+v %q", i, s.Inbound.TLS, s.Inbound.Request)
		}
		ids[s.ID] = true
	}

	// replay: the service in a child process, the replayer here
	mock := mocktest.NewServer(t, mockserver.Config{})
	rd, err := recording.Open(ctx, rec.dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mock.Load(ctx, rd.Scan); err != nil {
		t.Fatal(err)
	}
	rd.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=https-sut", "RETRACE_E2E_CERT="+certFile, "RETRACE_E2E_KEY="+keyFile,
		"RETRACE_E2E_PROVIDER="+base, "RETRACE_E2E_MOCK="+mock.Addr())
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	var addr string
	if _, err := fmt.Fscanln(stdout, &addr); err != nil {
		t.Fatalf("the service did not start: %v", err)
	}
	src, err := regress.OpenSource(ctx, rec.dir, func(err error) { t.Error(err) })
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var mu sync.Mutex
	var results []*regress.Result
	err = regress.Run(ctx, regress.Config{Source: src, Select: regress.Selection{IDs: ids},
		Target: "https://" + addr, MockAdmin: mock.AdminURL(), TLS: &tls.Config{RootCAs: ca.Pool()}},
		func(r *regress.Result) { mu.Lock(); results = append(results, r); mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != tlsTraces {
		t.Fatalf("%d sessions replayed, want %d", len(results), tlsTraces)
	}
	for _, r := range results {
		if r.Status != regress.Passed {
			t.Errorf("session %s: %s %s %+v", r.Session, r.Status, r.Error, r.Findings)
		}
	}
}

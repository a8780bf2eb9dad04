package writepath

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	goredis "github.com/redis/go-redis/v9"

	"github.com/retrace-dev/retrace/examples/orders"
	"github.com/retrace-dev/retrace/examples/orders/orderstest"
	"github.com/retrace-dev/retrace/examples/pricing"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/recording/redisstore" // redis:// for the replicas' shared store
	"github.com/retrace-dev/retrace/replayer/analyze"
	"github.com/retrace-dev/retrace/trace"
)

// Traffic recorded: orders (the write path) and stock reads.
const (
	recordedOrders = 60
	recordedReads  = 20
)

// loadRate and loadFor are the load of every run: a few hundred requests
// per second for ten seconds (WRITEPATH_RATE overrides the rate).
const loadFor = 10 * time.Second

func loadRate() int {
	if n, err := strconv.Atoi(os.Getenv("WRITEPATH_RATE")); err == nil && n > 0 {
		return n
	}
	return 300
}

// TestWritePathLoad: one service in replay mode with its pricing service
// baffled (answered by a mock server loaded with the recordings) and MySQL
// and Redis rewritten to shadow instances, under `retrace load --mode rate`.
func TestWritePathLoad(t *testing.T) { writePath(t, 1) }

// TestWritePathLoadReplicas: the same with two services and two mock
// replicas (one per service, as one per host), each reading the sessions
// pre-warmed into Redis as traces name them; the load runs as two shards.
func TestWritePathLoadReplicas(t *testing.T) { writePath(t, 2) }

func writePath(t *testing.T, replicas int) {
	retraceBin, ordersBin := binaries(t)
	var pricingHits atomic.Int64
	pricingSrv := orderstest.Pricing(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { pricingHits.Add(1); h.ServeHTTP(w, r) })
	})
	prod := orderstest.Config(t, pricingSrv.URL)
	shadow := shadowOf(t, prod)
	work := t.TempDir()
	recDir := filepath.Join(work, "recordings")

	// 1. Record production traffic.
	rec := startOrders(t, ordersBin, append(ordersEnv(prod), "RETRACE_MODE=record", "RETRACE_RECORD="+recDir, "RETRACE_APP=orders"))
	sendRecordedTraffic(t, rec.url)
	sessions := waitForSessions(t, recDir, recordedOrders+recordedReads)
	rec.stop(t)
	expect := expectedOrders(t, sessions)
	if len(expect) != recordedOrders {
		t.Fatalf("%d recorded orders, want %d", len(expect), recordedOrders)
	}

	// 2. extract → prepare, each request keeping its recording's id; the
	// load input sends every recording many times.
	reqs := filepath.Join(work, "requests.jsonl")
	prepared := filepath.Join(work, "prepared.jsonl")
	run(t, retraceBin, "extract", "--from", recDir, "--out", reqs)
	run(t, retraceBin, "prepare", "--in", reqs, "--out", prepared, "--header", "X-Load-Test: writepath")
	input := repeatInput(t, prepared, sessions, filepath.Join(work, "load.jsonl"), loadRate()*int(loadFor/time.Second)/(recordedOrders+recordedReads)+1)

	// 3. Mock servers, then the services in replay mode.
	mocks := startMocks(t, replicas, sessions)
	prodMySQL, prodRedis, pricingAddr := mysqlAddr(t, prod.MySQLDSN), prod.RedisAddr, strings.TrimPrefix(pricingSrv.URL, "http://")
	before := prodState(t, prod)
	hitsBefore := pricingHits.Load()
	var suts []*child
	for i := range replicas {
		suts = append(suts, startOrders(t, ordersBin, append(ordersEnv(prod), "RETRACE_MODE=replay",
			"RETRACE_MOCK_ADDR="+mocks[i].Addr(), "RETRACE_BAFFLE="+pricingAddr,
			"RETRACE_REWRITE="+prodMySQL+"="+mysqlAddr(t, shadow.MySQLDSN)+","+prodRedis+"="+shadow.RedisAddr)))
	}

	// 4. Each recorded order once, by hand: the answer its recording
	// implies (prices, discounts, shipping from the baffled pricing
	// service's recorded answers and the shadow's seed data).
	direct := checkAnswers(t, suts[0].url, sessions)

	// 5. The load: one shard per service, each with its mock's admin.
	out := filepath.Join(work, "results")
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() {
			runErr(t, retraceBin, "load", "--input", input, "--target", suts[i].url, "--mode", "rate",
				"--rate", strconv.Itoa(loadRate()), "--duration", loadFor.String(), "--shard", fmt.Sprintf("%d/%d", i, replicas),
				"--trace-ids", "--fail-status", "400", "--mock-admin", mocks[i].AdminURL(), "--progress", "off", "--out", out)
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		if t.Failed() {
			for i, s := range suts {
				t.Logf("service %d output:\n%s", i, tail(s.log.String(), 4000))
			}
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	var sum analyze.Summary
	if err := json.Unmarshal(run(t, retraceBin, "analyze", out, "--format", "json"), &sum); err != nil {
		t.Fatal(err)
	}
	t.Logf("load: %d shard(s), %d sent, %.1f req/s, p50 %.2fms p99 %.2fms; mock: %+v", sum.Shards, sum.Sent, sum.Total.Rate, sum.Total.P50Ms, sum.Total.P99Ms, sum.Mock)

	// 6. What the load did.
	posts := int64(0)
	for _, e := range sum.APIs {
		if e.Count > 0 && (e.P50Ms <= 0 || e.P99Ms < e.P50Ms || e.MaxMs < e.P99Ms) {
			t.Errorf("API %s: percentiles p50 %.3f p99 %.3f max %.3f", e.API, e.P50Ms, e.P99Ms, e.MaxMs)
		}
		if e.API == "POST /orders" {
			posts = e.Count
		}
	}
	if sum.Total.Errors != 0 {
		for i := range replicas {
			b, _ := os.ReadFile(filepath.Join(out, fmt.Sprintf("shard-%d-of-%d", i, replicas), "errors.jsonl"))
			lines := strings.SplitN(string(b), "\n", 4)
			t.Logf("shard %d: first errors:\n%s", i, strings.Join(lines[:min(3, len(lines))], "\n"))
		}
	}
	if sum.Shards != replicas || sum.Total.Errors != 0 || sum.Sent < int64(loadRate())*int64(loadFor/time.Second)*9/10 || posts == 0 {
		t.Fatalf("load: %d shards, %d sent, %d errors, %d orders: %+v", sum.Shards, sum.Sent, sum.Total.Errors, posts, sum.Total)
	}
	if sum.Mock == nil || sum.Mock.Mocks != replicas || sum.Mock.Answers < posts || sum.Mock.P99Us <= 0 {
		t.Errorf("mock answer times not reported beside the results: %+v", sum.Mock)
	}
	for _, m := range mocks {
		var missing []mockserver.MissingMock
		getJSON(t, m.AdminURL()+"/missing", &missing)
		if len(missing) > 0 {
			t.Errorf("mock %s: %d missing mocks, the first: %+v", m.Addr(), len(missing), missing[0])
		}
	}
	if after := prodState(t, prod); after != before {
		t.Errorf("the production databases changed under load:\nbefore %+v\nafter  %+v", before, after)
	}
	if n := pricingHits.Load() - hitsBefore; n != 0 {
		t.Errorf("the pricing service received %d requests under load", n)
	}
	checkShadow(t, shadow, expect, posts+int64(direct))
}

// tail is the end of s, at most n bytes.
func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// child is a process of the orders binary.
type child struct {
	cmd  *exec.Cmd
	url  string
	log  *watchBuffer
	once sync.Once
}

// startOrders starts the orders binary on a port of its own and waits until
// it listens; it is stopped when the test ends.
func startOrders(t *testing.T, bin string, env []string) *child {
	t.Helper()
	c := &child{log: &watchBuffer{ready: make(chan string, 1)}}
	c.cmd = exec.Command(bin, "-listen", "127.0.0.1:0")
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.stop(t) })
	select {
	case addr := <-c.log.ready:
		c.url = "http://" + addr
	case <-time.After(30 * time.Second):
		t.Fatalf("orders did not start:\n%s", c.log.String())
	}
	return c
}

// stop ends the process with SIGTERM (the service shuts down and the
// recorder flushes), killing it if that takes more than 15s.
func (c *child) stop(t *testing.T) {
	c.once.Do(func() {
		c.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- c.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			c.cmd.Process.Kill()
			<-done
			t.Errorf("orders did not stop on SIGTERM:\n%s", c.log.String())
		}
	})
}

// watchBuffer keeps a child's output and reports its listening address.
type watchBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	ready chan string
	seen  bool
}

func (w *watchBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if !w.seen {
		if _, rest, ok := strings.Cut(w.b.String(), orders.ListeningPrefix); ok {
			if addr, _, ok := strings.Cut(rest, "\n"); ok {
				w.seen = true
				w.ready <- strings.TrimSpace(addr)
			}
		}
	}
	return len(p), nil
}

func (w *watchBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func ordersEnv(c orders.Config) []string {
	return []string{orders.EnvMySQLDSN + "=" + c.MySQLDSN, orders.EnvRedisAddr + "=" + c.RedisAddr,
		orders.EnvRedisPrefix + "=" + c.RedisPrefix, orders.EnvPricingURL + "=" + c.PricingURL, "RETRACE_LOG=error"}
}

// run runs a retrace command and returns its standard output; a failure
// fails the test with its output.
func run(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	out, ok := runErr(t, bin, args...)
	if !ok {
		t.FailNow()
	}
	return out
}

// runErr is run for other goroutines: it reports a failure without
// stopping the test.
func runErr(t *testing.T, bin string, args ...string) ([]byte, bool) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Errorf("retrace %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		return nil, false
	}
	t.Logf("retrace %s:\n%s", args[0], stderr.String())
	return stdout.Bytes(), true
}

// orderBody is recorded order i: user i+1, one to three SKUs, a coupon on
// every third.
func orderBody(i int) []byte {
	skus := pricing.SKUs()
	req := orders.CreateOrder{UserID: int64(i + 1)}
	for k := 0; k <= i%3; k++ {
		req.Items = append(req.Items, orders.OrderItem{SKU: skus[(i+k)%len(skus)], Qty: 1 + (i+k)%4})
	}
	if i%3 == 0 {
		req.Coupon = "WELCOME10"
	}
	b, _ := json.Marshal(req)
	return b
}

func sendRecordedTraffic(t *testing.T, base string) {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	skus := pricing.SKUs()
	for i := range recordedOrders + recordedReads {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var resp *http.Response
			var err error
			want := http.StatusCreated
			if i < recordedOrders {
				resp, err = hc.Post(base+"/orders", "application/json", bytes.NewReader(orderBody(i)))
			} else {
				resp, err = hc.Get(base + "/stock/" + skus[i%len(skus)])
				want = http.StatusOK
			}
			if err != nil {
				t.Errorf("recording request %d: %v", i, err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("recording request %d: %s %s", i, resp.Status, b)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// waitForSessions reads the recordings until n sessions are there.
func waitForSessions(t *testing.T, dir string, n int) []*recording.Session {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var out []*recording.Session
		if st, err := recording.Open(context.Background(), dir); err == nil {
			st.Scan(context.Background(), func(s *recording.Session) error { out = append(out, s); return nil })
			st.Close()
		}
		if len(out) >= n {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions recorded, want %d", len(out), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// expected is what a recorded order implies for the row a replay of it
// writes: everything but the order's number and time.
type expected struct {
	Status, Currency                    string
	Subtotal, Discount, Shipping, Total int64
	Lines                               string
}

// expectedOrders maps "user|lines" of each recorded order to what its
// recording implies.
func expectedOrders(t *testing.T, sessions []*recording.Session) map[string]expected {
	t.Helper()
	out := map[string]expected{}
	for _, s := range sessions {
		if !bytes.HasPrefix(s.Inbound.Request, []byte("POST /orders ")) {
			continue
		}
		body := responseBody(t, s.Inbound.Response)
		var o orders.Order
		if err := json.Unmarshal(body, &o); err != nil {
			t.Fatalf("recorded response of %s: %v: %s", s.ID, err, body)
		}
		lines, _ := json.Marshal(o.Lines)
		key := fmt.Sprintf("%d|%s", o.UserID, lines)
		out[key] = expected{Status: o.Status, Currency: o.Currency, Subtotal: o.SubtotalCents, Discount: o.DiscountCents,
			Shipping: o.ShippingCents, Total: o.TotalCents, Lines: string(lines)}
	}
	return out
}

func responseBody(t *testing.T, raw []byte) []byte {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
	if err != nil {
		t.Fatalf("recorded response %q: %v", raw, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withoutIdentity is an order's JSON without its number and time, which a
// replay against the shadows (its own order sequence) and the real clock
// gives anew.
func withoutIdentity(t *testing.T, body []byte) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	delete(m, "order_id")
	delete(m, "created_at")
	b, _ := json.Marshal(m)
	return string(b)
}

// repeatInput writes the prepared requests reps times: every recording is
// sent many times, each under a trace id of its own. It checks that every
// request kept the id of the session it came from.
func repeatInput(t *testing.T, prepared string, sessions []*recording.Session, out string, reps int) string {
	t.Helper()
	ids := map[string]bool{}
	for _, s := range sessions {
		ids[s.ID] = true
	}
	b, err := os.ReadFile(prepared)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != len(sessions) {
		t.Fatalf("prepared %d requests from %d sessions", len(lines), len(sessions))
	}
	for _, l := range lines {
		var r struct {
			ID     string              `json:"id"`
			Header map[string][]string `json:"header"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil || !ids[r.ID] || r.Header["X-Load-Test"] == nil {
			t.Fatalf("prepared request lost its recording id or header (%v): %s", err, l)
		}
	}
	var buf strings.Builder
	for range reps {
		for _, l := range lines {
			buf.WriteString(l)
			buf.WriteByte('\n')
		}
	}
	if err := os.WriteFile(out, []byte(buf.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

// startMocks starts the mock servers: one loaded with the sessions, or
// replicas reading them from Redis (pre-warmed there) as traces name them.
func startMocks(t *testing.T, replicas int, sessions []*recording.Session) []*mockserver.Server {
	t.Helper()
	if replicas == 1 {
		return []*mockserver.Server{mocktest.NewServer(t, mockserver.Config{}, sessions...)}
	}
	ctx := context.Background()
	url := "redis://" + testenv.RedisAddr(t) + "/0?prefix=writepath-" + orderstest.Token() + ":"
	warm, err := recording.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Write(ctx, sessions); err != nil {
		t.Fatal(err)
	}
	if err := warm.Close(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rs, err := recording.Open(ctx, url)
		if err != nil {
			return
		}
		defer rs.Close()
		if r, ok := rs.(*redisstore.Store); ok {
			rdb := goredis.NewClient(&goredis.Options{Addr: testenv.RedisAddr(t)})
			defer rdb.Close()
			iter := rdb.Scan(ctx, 0, r.Prefix()+"*", 1000).Iterator()
			for iter.Next(ctx) {
				rdb.Del(ctx, iter.Val())
			}
		}
	})
	var out []*mockserver.Server
	for range replicas {
		store, err := recording.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		out = append(out, mocktest.NewServer(t, mockserver.Config{Lookup: func(ctx context.Context, id string) (*recording.Session, error) {
			s, err := store.Get(ctx, id)
			if errors.Is(err, recording.ErrNotFound) {
				return nil, nil
			}
			return s, err
		}}))
	}
	return out
}

// checkAnswers sends each recorded order once under a derived trace id and
// compares the answer with the recorded one (but for the order's number and
// time); it returns how many orders it placed.
func checkAnswers(t *testing.T, base string, sessions []*recording.Session) int {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	n := 0
	for _, s := range sessions {
		if !bytes.HasPrefix(s.Inbound.Request, []byte("POST /orders ")) {
			continue
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(s.Inbound.Request)))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(req.Body)
		tid, _ := trace.Alias(s.ID, "check")
		hr, _ := http.NewRequest("POST", base+"/orders", bytes.NewReader(body))
		hr.Header.Set("Content-Type", "application/json")
		hr.Header.Set("Retrace-Trace-Id", tid)
		resp, err := hc.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		n++
		if resp.StatusCode != http.StatusCreated {
			t.Errorf("order of %s: %s %s", s.ID, resp.Status, got)
			continue
		}
		if g, w := withoutIdentity(t, got), withoutIdentity(t, responseBody(t, s.Inbound.Response)); g != w {
			t.Errorf("order of %s answered\n%s\nrecorded\n%s", s.ID, g, w)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return n
}

// prodSnapshot is what the load must leave alone in production.
type prodSnapshot struct {
	Orders   int64
	OrderSeq string
	Stock    string
}

func prodState(t *testing.T, c orders.Config) prodSnapshot {
	t.Helper()
	db := openDB(t, c.MySQLDSN)
	defer db.Close()
	var s prodSnapshot
	if err := db.QueryRow("SELECT COUNT(*) FROM orders").Scan(&s.Orders); err != nil {
		t.Fatal(err)
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: c.RedisAddr})
	defer rdb.Close()
	s.OrderSeq = rdb.Get(context.Background(), c.RedisPrefix+"order-seq").Val()
	var keys []string
	for _, sku := range pricing.SKUs() {
		keys = append(keys, c.RedisPrefix+"stock:"+sku)
	}
	s.Stock = fmt.Sprint(rdb.MGet(context.Background(), keys...).Val())
	return s
}

// checkShadow: the shadow database holds exactly the orders the load and
// the hand checks placed, each the row its recording implies.
func checkShadow(t *testing.T, c orders.Config, expect map[string]expected, want int64) {
	t.Helper()
	db := openDB(t, c.MySQLDSN)
	defer db.Close()
	rows, err := db.Query("SELECT user_id, status, currency, subtotal_cents, discount_cents, shipping_cents, total_cents, items FROM orders")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var n int64
	bad := 0
	for rows.Next() {
		var uid int64
		var items string
		var e expected
		if err := rows.Scan(&uid, &e.Status, &e.Currency, &e.Subtotal, &e.Discount, &e.Shipping, &e.Total, &items); err != nil {
			t.Fatal(err)
		}
		n++
		var lines []orders.Line
		if err := json.Unmarshal([]byte(items), &lines); err != nil {
			t.Fatalf("shadow order items %q: %v", items, err)
		}
		lb, _ := json.Marshal(lines)
		w, ok := expect[fmt.Sprintf("%d|%s", uid, lb)]
		e.Lines = string(lb)
		if !ok || e.Status != w.Status || e.Currency != w.Currency || e.Subtotal != w.Subtotal || e.Discount != w.Discount ||
			e.Shipping != w.Shipping || e.Total != w.Total {
			if bad++; bad <= 5 {
				t.Errorf("shadow order of user %d: %+v, its recording implies %+v (found: %v)", uid, e, w, ok)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Errorf("the shadow database holds %d orders, want %d (the load's and the hand checks')", n, want)
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: c.RedisAddr})
	defer rdb.Close()
	if seq, _ := rdb.Get(context.Background(), c.RedisPrefix+"order-seq").Int64(); seq != want {
		t.Errorf("the shadow Redis order sequence is at %d, want %d", seq, want)
	}
}

// shadowOf creates the production configuration's database on the shadow
// MariaDB and its Redis keys on the shadow redis-server (schema and seed
// data), and returns the configuration that reaches them.
func shadowOf(t *testing.T, prod orders.Config) orders.Config {
	t.Helper()
	pc, err := mysql.ParseDSN(prod.MySQLDSN)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := mysql.ParseDSN(testenv.MySQLShadowDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	if sc.User != pc.User || sc.Passwd != pc.Passwd {
		t.Skip("the shadow MariaDB must accept the production credentials (the service is rewritten, not reconfigured)")
	}
	admin := sc.Clone()
	admin.DBName = ""
	adb := openDB(t, admin.FormatDSN())
	defer adb.Close()
	if _, err := adb.Exec("CREATE DATABASE " + pc.DBName); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		adb := openDB(t, admin.FormatDSN())
		defer adb.Close()
		adb.Exec("DROP DATABASE IF EXISTS " + pc.DBName)
	})
	dsn := pc.Clone()
	dsn.Addr = sc.Addr
	shadow := prod
	shadow.MySQLDSN = dsn.FormatDSN()
	shadow.RedisAddr = testenv.RedisShadowAddr(t)
	srv, err := orders.NewServer(shadow)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rdb := goredis.NewClient(&goredis.Options{Addr: shadow.RedisAddr})
		defer rdb.Close()
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, shadow.RedisPrefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	})
	return shadow
}

func openDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func mysqlAddr(t *testing.T, dsn string) string {
	t.Helper()
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		t.Fatalf("MySQL address %q: %v", c.Addr, err)
	}
	return c.Addr
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
}

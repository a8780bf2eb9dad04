package mockserver_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	goredis "github.com/redis/go-redis/v9"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
)

// expectClosed reads from c until the server closes it, failing after a
// generous bound (the bound only catches hangs; nothing is timed).
func expectClosed(t *testing.T, name string, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("%s: the server did not close the connection", name)
	}
	c.Close()
}

func TestBadInputAffectsOnlyItsConnection(t *testing.T) {
	ctx := context.Background()
	sess, keys, vals := recordRedisGets(t, "robust")
	srv := mocktest.NewServer(t, mockserver.Config{MaxFrame: 1024, ReadTimeout: 200 * time.Millisecond}, sess)
	good := replayRedis(t, srv.Addr(), testenv.RedisAddr(t), 1)
	check := func(i int) {
		t.Helper()
		defer mocktest.Bind("robust")()
		good.Set(ctx, keys[i], vals[i], 0)
	}
	check(0)
	dial := func() net.Conn {
		c, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	redisDst := testenv.RedisAddr(t)
	bad := map[string][]byte{
		"not a frame":        []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"frame too long":     trace.AppendFrame(nil, "robust", redisDst, make([]byte, 2048)),
		"bad length":         []byte(`/*retrace{"tid":"robust","dst":"` + redisDst + `","len":-1}*/`),
		"malformed redis":    trace.AppendFrame(nil, "robust", redisDst, []byte("*x\r\n$3\r\nGET\r\n")),
		"slow sender":        []byte(`/*retrace{"tid":"robust","dst":"`), // and then nothing
		"frame cut short":    trace.AppendFrame(nil, "robust", redisDst, []byte("*1\r\n$4\r\nPING\r\n"))[:40],
		"unknown protocol":   trace.AppendFrame(nil, "robust", "127.0.0.1:9", []byte{0, 1, 2, 3}),
		"oversize head line": append(trace.AppendFrameHeader(nil, "robust", redisDst, 0), trace.AppendFrame(nil, "robust", redisDst, []byte("*1\r\n$999999999\r\n"))...),
	}
	var wg sync.WaitGroup
	for name, b := range bad {
		c := dial()
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { expectClosed(t, name, c) })
	}
	wg.Wait()
	for i := 1; i < nKeys; i++ {
		check(i)
	}
	defer mocktest.Bind("robust")()
	for i, k := range keys {
		if v, err := good.Get(ctx, k).Result(); v != vals[i] {
			t.Fatalf("after bad connections: GET %s = %q, %v", k, v, err)
		}
	}
}

func TestMissingMocksAreProtocolErrors(t *testing.T) {
	ctx := context.Background()
	// Recordings for each protocol, all under one trace.
	ds := downstream(t)
	httpDst := ds.Listener.Addr().String()
	dbName, _ := scratchDB(t, 2)
	rec := mocktest.NewRecorder()
	hc := httpClient(rec.Dialer("http", "miss"))
	resp, err := hc.Get("http://" + httpDst + "/items/1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	hc.CloseIdleConnections()
	rc := recordingRedis(t, rec, "miss")
	rc.Set(ctx, "retrace-mock-miss", "1", 0)
	rc.Close()
	db := mysqlDB(t, rec.Dialer("mysql", "miss"), dbName, 1)
	var v string
	if err := db.QueryRow("SELECT v FROM t WHERE id = 1").Scan(&v); err != nil {
		t.Fatal(err)
	}
	db.Close()
	srv := mocktest.NewServer(t, mockserver.Config{}, rec.Sessions()...)

	d := &mocktest.Dialer{Mock: srv.Addr(), TID: "miss"}
	// HTTP: 502 with an explanation header.
	resp, err = httpClient(d.DialContext).Get("http://" + httpDst + "/never/recorded")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 502 || !strings.Contains(resp.Header.Get("X-Retrace-Missing"), "GET /never/recorded") {
		t.Errorf("HTTP missing mock: %s, X-Retrace-Missing %q", resp.Status, resp.Header.Get("X-Retrace-Missing"))
	}
	// Redis: -ERR.
	r := goredis.NewClient(&goredis.Options{Addr: testenv.RedisAddr(t), Dialer: d.DialContext, MaxRetries: -1})
	defer r.Close()
	if err := r.Get(ctx, "never-recorded").Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR retrace:") {
		t.Errorf("Redis missing mock: %v", err)
	}
	// MySQL: an error packet, and the connection stays usable.
	mdb := mysqlDB(t, d.DialContext, dbName, 1)
	var me *mysql.MySQLError
	if err := mdb.QueryRow("SELECT 42 FROM never_recorded").Scan(&v); !errors.As(err, &me) || me.Number != 1105 {
		t.Errorf("MySQL missing mock: %v", err)
	}
	if err := mdb.QueryRow("SELECT v FROM t WHERE id = 1").Scan(&v); err != nil || !strings.HasPrefix(v, "row-1-") {
		t.Errorf("MySQL after a missing mock: %q, %v", v, err)
	}
	// Untraced traffic with no proxy configured is refused.
	u := replayRedis(t, srv.Addr(), testenv.RedisAddr(t), 1)
	if err := u.Get(ctx, "x").Err(); err == nil || !strings.Contains(err.Error(), "untraced") {
		t.Errorf("untraced Redis command: %v", err)
	}

	var missing []mockserver.MissingMock
	getJSON(t, srv.AdminURL()+"/missing", &missing)
	protos := map[string]int{}
	for _, m := range missing {
		protos[m.Proto]++
		if m.Reason == "" || len(m.Request) == 0 {
			t.Errorf("missing mock without reason or request: %+v", m)
		}
	}
	if protos["http"] != 1 || protos["redis"] != 2 || protos["mysql"] != 1 {
		t.Errorf("/missing by protocol: %v", protos)
	}
	if n := len(missesOf(report(t, srv, "miss"))); n != 3 {
		t.Errorf("trace report lists %d missing mocks, want 3", n)
	}
	// Metrics count them.
	resp, err = http.Get(srv.AdminURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{`retrace_mock_misses_total{proto="redis"} 2`, `retrace_mock_requests_total{proto="mysql"}`,
		`retrace_mock_matches_total{strategy="order"}`, "retrace_mock_open_connections", "retrace_mock_answer_seconds_bucket"} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	var h struct {
		OK       bool
		Sessions int
	}
	getJSON(t, srv.AdminURL()+"/healthz", &h)
	if !h.OK || h.Sessions != 1 {
		t.Errorf("/healthz: %+v", h)
	}
}

func TestProxyUntracedAndPassthrough(t *testing.T) {
	ctx := context.Background()
	addr := testenv.RedisAddr(t)
	key := "retrace-mock-proxy-" + randHex(4)
	t.Run("untraced", func(t *testing.T) {
		srv := mocktest.NewServer(t, mockserver.Config{Untraced: map[string]string{"*": ""}})
		c := replayRedis(t, srv.Addr(), addr, 1)
		if err := c.Set(ctx, key, "real", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if v, err := c.Get(ctx, key).Result(); v != "real" || err != nil {
			t.Fatalf("GET through the proxy: %q, %v", v, err)
		}
	})
	t.Run("passthrough", func(t *testing.T) {
		srv := mocktest.NewServer(t, mockserver.Config{Passthrough: map[string]string{"10.9.9.9:6379": addr}})
		d := &mocktest.Dialer{Mock: srv.Addr(), TID: "any-trace", Dst: "10.9.9.9:6379"}
		c := goredis.NewClient(&goredis.Options{Addr: "10.9.9.9:6379", Dialer: d.DialContext})
		defer c.Close()
		if v, err := c.Get(ctx, key).Result(); v != "real" || err != nil {
			t.Fatalf("GET through pass-through: %q, %v", v, err)
		}
	})
}

// A raw TCP protocol: one frame is one request.
func TestGenericProtocol(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Go(func() { // a line server: "hi NAME" → "hello NAME NONCE"
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					l, err := br.ReadString('\n')
					if err != nil {
						return
					}
					fmt.Fprintf(c, "hello %s %s\n", strings.TrimSpace(strings.TrimPrefix(l, "hi ")), randHex(3))
				}
			})
		}
	})
	rec := mocktest.NewRecorder()
	talk := func(c net.Conn) []string {
		defer c.Close()
		br := bufio.NewReader(c)
		var out []string
		for _, n := range []string{"ann", "bob", "cy"} {
			fmt.Fprintf(c, "hi %s\n", n)
			l, err := br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
		}
		return out
	}
	c, err := rec.Dialer("raw", "gen")(ctx(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	want := talk(c)
	srv := mocktest.NewServer(t, mockserver.Config{Strategies: []mockserver.Strategy{"hamming"}}, rec.Sessions()...)
	d := &mocktest.Dialer{Mock: srv.Addr(), TID: "gen"}
	c, err = d.DialContext(ctx(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if got := talk(c); strings.Join(got, "") != strings.Join(want, "") {
		t.Fatalf("raw replay: got %q, want %q", got, want)
	}
}

func ctx() context.Context { return context.Background() }

// A MySQL destination no recording knows gets the default greeting: the
// driver connects, set-up is answered, and queries get error packets.
func TestMySQLUnknownDestinationDefaultGreeting(t *testing.T) {
	srv := mocktest.NewServer(t, mockserver.Config{})
	d := &mocktest.Dialer{Mock: srv.Addr(), TID: "nobody"}
	mysql.RegisterDialContext("retrace-unknown", func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	})
	db, err := sql.Open("mysql", "u:p@retrace-unknown(10.1.1.1:3306)/db")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Ping(); err != nil {
		t.Fatalf("ping through the default greeting: %v", err)
	}
	var me *mysql.MySQLError
	if err := db.QueryRow("SELECT 1").Scan(new(int)); !errors.As(err, &me) || !strings.Contains(me.Message, "resolves to no recording") {
		t.Fatalf("query: %v", err)
	}
}

// With Lookup, a recording is fetched when a trace first names it.
func TestLookupFetchesRecordingsOnDemand(t *testing.T) {
	ctx := context.Background()
	sess, keys, vals := recordRedisGets(t, "lazy-1")
	var lookups atomic.Int32
	srv := mocktest.NewServer(t, mockserver.Config{Lookup: func(_ context.Context, id string) (*recording.Session, error) {
		lookups.Add(1)
		if id == sess.ID {
			return sess, nil
		}
		return nil, nil
	}})
	c := replayRedis(t, srv.Addr(), testenv.RedisAddr(t), 1)
	defer mocktest.Bind("lazy-1")()
	for i := range keys {
		c.Set(ctx, keys[i], vals[i], 0)
	}
	if v, err := c.Get(ctx, keys[0]).Result(); v != vals[0] {
		t.Fatalf("GET: %q, %v", v, err)
	}
	if n := lookups.Load(); n != 1 {
		t.Fatalf("%d lookups, want 1", n)
	}
}

// A pooled connection may sit idle far longer than ReadTimeout: idleness is
// no error until IdleTimeout (when not negative).
func TestIdleConnections(t *testing.T) {
	ctx := context.Background()
	sess, keys, vals := recordRedisGets(t, "idle")
	t.Run("kept without IdleTimeout", func(t *testing.T) {
		srv := mocktest.NewServer(t, mockserver.Config{ReadTimeout: 50 * time.Millisecond, IdleTimeout: -1}, sess)
		d := &mocktest.Dialer{Mock: srv.Addr(), TID: "idle"}
		c, err := d.DialContext(ctx, "tcp", testenv.RedisAddr(t)) // one connection, no pool to hide a redial
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for i, pause := range []time.Duration{0, 300 * time.Millisecond} { // six read timeouts, idle
			time.Sleep(pause)
			c.Write([]byte(fmt.Sprintf("*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(keys[i]), keys[i], len(vals[i]), vals[i])))
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if l, err := br.ReadString('\n'); l != "+OK\r\n" {
				t.Fatalf("SET %d after %s idle: %q, %v", i, pause, l, err)
			}
		}
	})
	t.Run("closed after IdleTimeout", func(t *testing.T) {
		srv := mocktest.NewServer(t, mockserver.Config{ReadTimeout: 50 * time.Millisecond, IdleTimeout: 100 * time.Millisecond}, sess)
		c, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.Write(trace.AppendFrameHeader(nil, "idle", testenv.RedisAddr(t), 0))
		expectClosed(t, "idle connection", c)
	})
}

// A pass-through destination of a server-first protocol: the real MySQL
// greets through the mock server.
func TestPassthroughMySQL(t *testing.T) {
	dbName, addr := scratchDB(t, 1)
	srv := mocktest.NewServer(t, mockserver.Config{Passthrough: map[string]string{addr: ""}})
	d := &mocktest.Dialer{Mock: srv.Addr(), TID: "any"}
	db := mysqlDB(t, d.DialContext, dbName, 2)
	var v string
	if err := db.QueryRow("SELECT v FROM t WHERE id = ?", 1).Scan(&v); err != nil || !strings.HasPrefix(v, "row-1-") {
		t.Fatalf("query through pass-through: %q, %v", v, err)
	}
}

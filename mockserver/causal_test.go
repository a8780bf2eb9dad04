package mockserver_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
)

// cancelledSibling is a request whose two goroutines race as in the orders
// example's errgroup: one sends a slow MySQL query, the other waits on Redis
// for an item that never comes (BLPOP times out with a null answer), which
// fails the request and cancels the query. Against the real servers the
// query is always sent (and never answered) long before Redis gives up.
func cancelledSibling(ctx context.Context, db *sql.DB, rdb *goredis.Client, tid string, id int) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer mocktest.Bind(tid)()
		var v string
		return db.QueryRowContext(gctx, "SELECT CONCAT(v, SLEEP(?)) FROM t WHERE id = ?", 2, id).Scan(&v)
	})
	g.Go(func() error {
		defer mocktest.Bind(tid)()
		_, err := rdb.BLPop(gctx, time.Second, "retrace-mock-causal:"+tid).Result()
		if errors.Is(err, goredis.Nil) {
			return fmt.Errorf("nothing queued for %s: %w", tid, err)
		}
		return err
	})
	return g.Wait()
}

// TestCausalOrderKeepsCancelledCall replays requests whose recording holds
// a MySQL query that a sibling goroutine's failure cancelled after it was
// sent. The mock server answers Redis at once, so unless it holds that
// answer back until the trace has sent the query (as the recording shows),
// the replay cancels the query before sending it and the trace's downstream
// traffic differs from its recording: the failure end-to-end replays showed.
// Every trace must send exactly its recorded calls, matched within its own
// recording, with the same outcome.
func TestCausalOrderKeepsCancelledCall(t *testing.T) {
	const n = 32
	ctx := context.Background()
	dbName, _ := scratchDB(t, n)
	rec := mocktest.NewRecorder()
	realDB := mysqlDB(t, rec.Dialer("mysql", ""), dbName, n)
	realRedis := goredis.NewClient(&goredis.Options{Addr: testenv.RedisAddr(t), Dialer: rec.Dialer("redis", ""),
		PoolSize: n, MaxRetries: -1, ReadTimeout: -1})
	t.Cleanup(func() { realRedis.Close() })
	tag := randHex(4)
	tids := make([]string, n)
	for i := range tids {
		tids[i] = fmt.Sprintf("causal-%d-%s", i, tag)
	}
	run := func(db *sql.DB, rdb *goredis.Client) []string {
		got := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				if err := cancelledSibling(ctx, db, rdb, tids[i], i+1); err != nil {
					got[i] = err.Error()
				}
			})
		}
		wg.Wait()
		return got
	}
	want := run(realDB, realRedis)
	realDB.Close()
	realRedis.Close()
	byID := map[string]*recording.Session{}
	for _, s := range rec.Sessions() {
		byID[s.ID] = s
	}
	for i, tid := range tids {
		if !strings.HasPrefix(want[i], "nothing queued for "+tid) {
			t.Fatalf("recording %s: got %q, want the Redis failure", tid, want[i])
		}
		if s := byID[tid]; s == nil || len(executes(s)) != 1 {
			t.Fatalf("recording %s: want one MySQL execute sent before the cancellation, got session %+v", tid, s)
		}
	}

	srv := mocktest.NewServer(t, mockserver.Config{}, rec.Sessions()...)
	d := &mocktest.Dialer{Mock: srv.Addr()}
	replayDB := mysqlDB(t, d.DialContext, dbName, n)
	replayRedis := replayRedis(t, srv.Addr(), testenv.RedisAddr(t), n)
	for round := range 3 {
		if round > 0 {
			for _, tid := range tids {
				forget(t, srv, tid)
			}
		}
		got := run(replayDB, replayRedis)
		for i, tid := range tids {
			if got[i] != want[i] {
				t.Errorf("round %d, trace %s: replay got %q, recorded %q", round, tid, got[i], want[i])
			}
			r := report(t, srv, tid)
			if m := missesOf(r); len(m) > 0 {
				t.Errorf("round %d, trace %s: missing mocks %+v", round, tid, m)
			}
			for _, c := range r.Unused {
				if c.Proto == "mysql" && len(mysqlCmds(c.Request)) > 0 && mysqlCmds(c.Request)[0] != 0x19 {
					t.Errorf("round %d, trace %s: recorded MySQL call %d (command 0x%02x) never sent: the replay cancelled it first",
						round, tid, c.Seq, mysqlCmds(c.Request)[0])
				}
			}
			if r.Recording != tid {
				t.Errorf("round %d, trace %s: answered from recording %q", round, tid, r.Recording)
			}
		}
	}
}

// executes returns the MySQL COM_STMT_EXECUTE calls of s.
func executes(s *recording.Session) []recording.Call {
	var out []recording.Call
	for _, c := range s.Calls {
		if cmds := mysqlCmds(c.Request); c.Proto == "mysql" && !c.Setup && len(cmds) > 0 && cmds[len(cmds)-1] == 0x17 {
			out = append(out, c)
		}
	}
	return out
}

// mysqlCmds returns the command byte of every packet in a recorded request.
func mysqlCmds(b []byte) []byte {
	var out []byte
	for len(b) >= 5 {
		n := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
		if n == 0 || 4+n > len(b) {
			break
		}
		out = append(out, b[4])
		b = b[4+n:]
	}
	return out
}

// forget makes the mock server forget what trace tid consumed, so the
// recording can be replayed again under the same id.
func forget(t *testing.T, srv *mockserver.Server, tid string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, srv.AdminURL()+"/traces/"+tid, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("DELETE /traces/%s: %s", tid, resp.Status)
	}
}

// causalSession is a recording of two concurrent raw calls: the answer to
// the first (to a:1) came back after the second (to b:1) was sent.
func causalSession(id string) *recording.Session {
	return &recording.Session{V: recording.SchemaVersion, ID: id, Calls: []recording.Call{
		{Seq: 0, Proto: "raw", Dst: "a.test:1", Conn: 1, Request: []byte("ping-a"), Response: []byte("pong-a"), StartNs: 0, DurNs: 10e6},
		{Seq: 1, Proto: "raw", Dst: "b.test:1", Conn: 2, Request: []byte("ping-b"), Response: []byte("pong-b"), StartNs: 5e6, DurNs: 1e6},
	}}
}

// rawCall sends p to dst through the mock server under trace tid and
// returns the connection, for reading the answer.
func rawCall(t *testing.T, mock, tid, dst string, p []byte) net.Conn {
	t.Helper()
	d := &mocktest.Dialer{Mock: mock, TID: tid}
	c, err := d.DialContext(context.Background(), "tcp", dst)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(p); err != nil {
		t.Fatal(err)
	}
	return c
}

func readAnswer(t *testing.T, c net.Conn, want string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, len(want))
	if _, err := io.ReadFull(c, b); err != nil || string(b) != want {
		t.Fatalf("answer %q, %v; want %q", b, err, want)
	}
}

// TestCausalHoldReleasedBySentCall: the answer to a:1 waits for the call
// to b:1 that the recording sent before that answer, however long
// (CausalWait is an hour here), and goes as soon as that call arrives.
func TestCausalHoldReleasedBySentCall(t *testing.T) {
	srv := mocktest.NewServer(t, mockserver.Config{CausalWait: time.Hour}, causalSession("hold-1"))
	a := rawCall(t, srv.Addr(), "hold-1", "a.test:1", []byte("ping-a"))
	a.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := a.Read(make([]byte, 8)); n > 0 || !isTimeout(err) {
		t.Fatalf("answer to a:1 given before the trace sent its call to b:1: %d bytes, %v", n, err)
	}
	b := rawCall(t, srv.Addr(), "hold-1", "b.test:1", []byte("ping-b"))
	readAnswer(t, b, "pong-b")
	readAnswer(t, a, "pong-a")
	if got := metric(t, srv, "retrace_mock_causal_holds_given_up_total"); got != "0" {
		t.Errorf("holds given up: %s, want 0", got)
	}
}

// TestCausalHoldGivesUpOnce: a call the replay never sends holds the
// answers recorded after it for CausalWait once per trace, then no more.
func TestCausalHoldGivesUpOnce(t *testing.T) {
	s := causalSession("hold-2")
	s.Calls = append(s.Calls, recording.Call{Seq: 2, Proto: "raw", Dst: "a.test:1", Conn: 1,
		Request: []byte("ping-a"), Response: []byte("pong-A"), StartNs: 20e6, DurNs: 1e6})
	srv := mocktest.NewServer(t, mockserver.Config{CausalWait: 20 * time.Millisecond}, s)
	a := rawCall(t, srv.Addr(), "hold-2", "a.test:1", []byte("ping-a"))
	readAnswer(t, a, "pong-a")
	if _, err := a.Write([]byte("ping-a")); err != nil {
		t.Fatal(err)
	}
	readAnswer(t, a, "pong-A")
	if got := metric(t, srv, "retrace_mock_causal_holds_total"); got != "1" {
		t.Errorf("holds: %s, want 1 (the second answer must not wait for the call given up on)", got)
	}
	if got := metric(t, srv, "retrace_mock_causal_holds_given_up_total"); got != "1" {
		t.Errorf("holds given up: %s, want 1", got)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// metric returns the value of an unlabelled metric from /metrics.
func metric(t *testing.T, srv *mockserver.Server, name string) string {
	t.Helper()
	resp, err := http.Get(srv.AdminURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return ""
}

// TestForgetOnAnOpenConnection: a trace forgotten through the admin API
// starts afresh, also on a connection that already served it (the
// connection keeps its last trace's state at hand).
func TestForgetOnAnOpenConnection(t *testing.T) {
	s := &recording.Session{V: recording.SchemaVersion, ID: "again", Calls: []recording.Call{
		{Seq: 0, Proto: "raw", Dst: "a.test:1", Request: []byte("ping"), Response: []byte("pong")}}}
	srv := mocktest.NewServer(t, mockserver.Config{}, s)
	c := rawCall(t, srv.Addr(), "again", "a.test:1", []byte("ping"))
	readAnswer(t, c, "pong")
	for range 3 {
		forget(t, srv, "again")
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		readAnswer(t, c, "pong")
	}
	if r := report(t, srv, "again"); len(r.Calls) != 1 || r.Calls[0].Matched != 0 {
		t.Errorf("report after the last forget: %+v", r.Calls)
	}
}

// TestCausalGiveUpOncePerRecording: once a trace gave up waiting for a
// call, other traces of the same recording (derived aliases, as a load
// test sends) do not wait for it: a write-path load test's calls to its
// shadow databases never reach the mock.
func TestCausalGiveUpOncePerRecording(t *testing.T) {
	srv := mocktest.NewServer(t, mockserver.Config{CausalWait: 20 * time.Millisecond}, causalSession("hold-3"))
	readAnswer(t, rawCall(t, srv.Addr(), "hold-3._a1", "a.test:1", []byte("ping-a")), "pong-a")
	for i := range 5 {
		readAnswer(t, rawCall(t, srv.Addr(), fmt.Sprintf("hold-3._b%d", i), "a.test:1", []byte("ping-a")), "pong-a")
	}
	if got := metric(t, srv, "retrace_mock_causal_holds_total"); got != "1" {
		t.Errorf("holds: %s, want 1", got)
	}
}

package mockserver_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
)

const nKeys = 8

// recordRedisGets records one trace reading nKeys keys in order and returns
// the session, the keys and their values.
func recordRedisGets(t *testing.T, tid string) (*recording.Session, []string, []string) {
	ctx := context.Background()
	rec := mocktest.NewRecorder()
	c := recordingRedis(t, rec, tid)
	prefix := "retrace-mock-" + randHex(4)
	var keys, vals []string
	for i := range nKeys {
		k, v := fmt.Sprintf("%s:%d", prefix, i), fmt.Sprintf("value-%d-%s", i, randHex(4))
		if err := c.Set(ctx, k, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
		keys, vals = append(keys, k), append(vals, v)
	}
	for _, k := range keys {
		if err := c.Get(ctx, k).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	return rec.Sessions()[0], keys, vals
}

func TestStrategiesRedisReordered(t *testing.T) {
	ctx := context.Background()
	sess, keys, vals := recordRedisGets(t, "strat-redis")
	rev := slices.Clone(vals)
	slices.Reverse(rev)
	first, last := slices.Repeat([]string{vals[0]}, nKeys), slices.Repeat([]string{vals[nKeys-1]}, nKeys)
	cases := []struct {
		name  string
		chain []mockserver.Strategy
		want  []string // answers to GETs of the keys in reverse order
	}{
		{"order answers in recorded order", []mockserver.Strategy{"order"}, vals},
		{"first", []mockserver.Strategy{"first"}, first},
		{"last", []mockserver.Strategy{"last"}, last},
		{"hamming", []mockserver.Strategy{"hamming"}, rev},
		{"redis command and key", []mockserver.Strategy{"redis", "order"}, rev},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := mocktest.NewServer(t, mockserver.Config{Strategies: tc.chain}, sess)
			c := replayRedis(t, srv.Addr(), testenv.RedisAddr(t), 2)
			defer mocktest.Bind("strat-redis")()
			for i := range keys { // the SETs, in recorded order
				if err := c.Set(ctx, keys[i], vals[i], 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			var got []string
			for i := nKeys - 1; i >= 0; i-- {
				v, err := c.Get(ctx, keys[i]).Result()
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, v)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
			r := report(t, srv, "strat-redis")
			for _, oc := range r.Calls {
				if oc.Matched < 0 || oc.Strategy == "" {
					t.Fatalf("call not matched: %+v", oc)
				}
			}
			last := r.Calls[len(r.Calls)-1]
			if last.Strategy != string(tc.chain[0]) {
				t.Fatalf("last GET answered by strategy %q, want %q", last.Strategy, tc.chain[0])
			}
		})
	}
}

// Concurrent GETs of one trace arrive in any order; only similarity
// matching answers each with its own value.
func TestStrategiesConcurrentReorderedCalls(t *testing.T) {
	ctx := context.Background()
	sess, keys, vals := recordRedisGets(t, "strat-conc")
	for _, chain := range [][]mockserver.Strategy{{"redis"}, {"hamming"}} {
		t.Run(string(chain[0]), func(t *testing.T) {
			srv := mocktest.NewServer(t, mockserver.Config{Strategies: []mockserver.Strategy{"order"},
				DstStrategies: map[string][]mockserver.Strategy{testenv.RedisAddr(t): chain}}, sess)
			c := replayRedis(t, srv.Addr(), testenv.RedisAddr(t), nKeys)
			got := make([]string, nKeys)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range nKeys {
				wg.Go(func() {
					defer mocktest.Bind("strat-conc")()
					<-start
					got[i], _ = c.Get(ctx, keys[nKeys-1-i]).Result()
				})
			}
			close(start)
			wg.Wait()
			for i := range nKeys {
				if got[i] != vals[nKeys-1-i] {
					t.Errorf("GET %s: got %q, want %q", keys[nKeys-1-i], got[i], vals[nKeys-1-i])
				}
			}
		})
	}
}

func TestStrategyJSONReorderedBodies(t *testing.T) {
	ds := downstream(t)
	dst := ds.Listener.Addr().String()
	rec := mocktest.NewRecorder()
	post := func(c *http.Client, i int) string {
		body := fmt.Sprintf(`{"customer":"c-1","item":%d,"qty":%d,"note":"same for all"}`, i, i*3)
		resp, err := c.Post("http://"+dst+"/orders", "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	rc := httpClient(rec.Dialer("http", "strat-json"))
	var want []string
	for i := range 5 {
		want = append(want, post(rc, i))
	}
	rc.CloseIdleConnections()
	sess := rec.Sessions()[0]
	for _, tc := range []struct {
		chain   []mockserver.Strategy
		correct int // answers that are the recorded answer of that request
	}{{[]mockserver.Strategy{"json"}, 5}, {[]mockserver.Strategy{"order"}, 1}} {
		t.Run(string(tc.chain[0]), func(t *testing.T) {
			srv := mocktest.NewServer(t, mockserver.Config{Strategies: tc.chain}, sess)
			d := &mocktest.Dialer{Mock: srv.Addr(), TID: "strat-json"}
			c := httpClient(d.DialContext)
			defer c.CloseIdleConnections()
			correct := 0
			for i := 4; i >= 0; i-- {
				got := post(c, i)
				var o struct{ Order struct{ Item int } }
				if err := json.Unmarshal([]byte(got), &o); err != nil {
					t.Fatalf("answer %q: %v", got, err)
				}
				if got == want[i] {
					correct++
				}
			}
			if correct != tc.correct {
				t.Errorf("%d of 5 reordered POSTs got their own recorded answer, want %d", correct, tc.correct)
			}
			r := report(t, srv, "strat-json")
			if tc.correct == 5 && (r.Calls[0].Strategy != "json" || r.Calls[0].Score != 1) {
				t.Errorf("first call: strategy %q score %v, want json 1", r.Calls[0].Strategy, r.Calls[0].Score)
			}
		})
	}
}

func TestStrategySQLReorderedQueries(t *testing.T) {
	ctx := context.Background()
	dbName, _ := scratchDB(t, 6)
	rec := mocktest.NewRecorder()
	db := mysqlDB(t, rec.Dialer("mysql", "strat-sql"), dbName, 1)
	read := func(db2 func(q string, args ...any) (string, error), i int) string {
		a, err := db2(fmt.Sprintf("SELECT v FROM t WHERE id = %d", i))
		if err != nil {
			return "error: " + err.Error()
		}
		b, err := db2("SELECT CONCAT(v, '/', n) FROM t WHERE id = ?", i)
		if err != nil {
			return "error: " + err.Error()
		}
		return a + "|" + b
	}
	q := func(db *sql.DB) func(string, ...any) (string, error) {
		return func(s string, args ...any) (string, error) {
			var v string
			err := db.QueryRowContext(ctx, s, args...).Scan(&v)
			return v, err
		}
	}
	var want []string
	for i := 1; i <= 5; i++ {
		w := read(q(db), i)
		if strings.HasPrefix(w, "error") {
			t.Fatal(w)
		}
		want = append(want, w)
	}
	db.Close()
	sess := rec.Sessions()[0]
	for _, tc := range []struct {
		chain   []mockserver.Strategy
		correct int
	}{{[]mockserver.Strategy{"sql"}, 5}, {[]mockserver.Strategy{"hamming"}, 5}, {[]mockserver.Strategy{"order"}, 1}} {
		t.Run(string(tc.chain[0]), func(t *testing.T) {
			srv := mocktest.NewServer(t, mockserver.Config{Strategies: tc.chain}, sess)
			d := &mocktest.Dialer{Mock: srv.Addr(), TID: "strat-sql"}
			rdb := mysqlDB(t, d.DialContext, dbName, 1)
			correct := 0
			for i := 5; i >= 1; i-- {
				if got := read(q(rdb), i); got == want[i-1] {
					correct++
				}
			}
			if correct != tc.correct {
				t.Errorf("%d of 5 reordered reads got their own recorded answers, want %d", correct, tc.correct)
			}
			rdb.Close()
			if m := missesOf(report(t, srv, "strat-sql")); len(m) > 0 {
				t.Errorf("missing mocks: %+v", m)
			}
		})
	}
}

// An alias replays one recording under several trace ids at once.
func TestAliasReplaysOneRecordingTwice(t *testing.T) {
	ctx := context.Background()
	sess, keys, vals := recordRedisGets(t, "alias-src")
	srv := mocktest.NewServer(t, mockserver.Config{}, sess)
	for _, a := range []string{"alias-a", "alias-b"} {
		b, _ := json.Marshal(mockserver.Alias{Trace: a, Recording: "alias-src"})
		resp, err := http.Post(srv.AdminURL()+"/traces", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("POST /traces: %s", resp.Status)
		}
	}
	c := replayRedis(t, srv.Addr(), testenv.RedisAddr(t), 4)
	var wg sync.WaitGroup
	for _, a := range []string{"alias-a", "alias-b"} {
		wg.Go(func() {
			defer mocktest.Bind(a)()
			for i := range keys {
				c.Set(ctx, keys[i], vals[i], 0)
			}
			for i, k := range keys {
				if v, err := c.Get(ctx, k).Result(); v != vals[i] {
					t.Errorf("%s: GET %s = %q, %v; want %q", a, k, v, err, vals[i])
				}
			}
		})
	}
	wg.Wait()
	r := report(t, srv, "alias-a")
	if r.Recording != "alias-src" || len(r.Calls) < 2*nKeys || len(r.Unused) != 0 {
		t.Fatalf("report of alias-a: recording %q, %d calls, %d unused", r.Recording, len(r.Calls), len(r.Unused))
	}
	// DELETE forgets the alias: the trace then resolves to no recording.
	before := srv.Traces()
	req, _ := http.NewRequest("DELETE", srv.AdminURL()+"/traces/alias-a", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if after := srv.Traces(); after != before-1 {
		t.Errorf("%d traces after DELETE, %d before", after, before)
	}
	defer mocktest.Bind("alias-a")()
	if err := c.Get(ctx, keys[0]).Err(); err == nil || err == goredis.Nil {
		t.Fatalf("GET after DELETE /traces/alias-a: %v, want a missing-mock error", err)
	}
}

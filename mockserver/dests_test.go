package mockserver_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
)

// movedWork is one trace's work against Redis and MySQL.
func movedWork(ctx context.Context, c *goredis.Client, db *sql.DB, prefix string, i int) string {
	r, err := redisWork(ctx, c, prefix, i)
	if err != nil {
		r = "redis error: " + err.Error()
	}
	m, err := mysqlWork(ctx, db, i)
	if err != nil {
		m = "mysql error: " + err.Error()
	}
	return r + " / " + m
}

// Recorded against the real servers, replayed with both moved to names of
// another environment that do not resolve: the mock server answers each
// from the recorded destination of its protocol (MySQL, whose server
// speaks first, from the client's silence), or from the mapping, and says
// so in Destinations.
func TestMovedDestinations(t *testing.T) {
	ctx := context.Background()
	dbName, _ := scratchDB(t, 17)
	prefix := "retrace-moved-" + randHex(4)
	const n = 16
	rec := mocktest.NewRecorder()
	want := make([]string, n)
	var redisDst string
	{
		c := recordingRedis(t, rec, "")
		redisDst = c.Options().Addr
		db := mysqlDB(t, rec.Dialer("mysql", ""), dbName, 4)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				defer mocktest.Bind(fmt.Sprintf("moved-%d-%s", i, prefix))()
				want[i] = movedWork(ctx, c, db, prefix, i)
			})
		}
		wg.Wait()
		c.Close()
		db.Close()
	}
	for i, w := range want {
		if strings.Contains(w, "error") {
			t.Fatalf("recording trace %d: %s", i, w)
		}
	}
	sessions := rec.Sessions()
	var mysqlDst string
	for _, c := range sessions[0].Calls {
		if c.Proto == recording.ProtoMySQL {
			mysqlDst = c.Dst
		}
	}
	const newRedis, newMySQL = "cache.staging.invalid:6390", "db.staging.invalid:3316"
	for _, tc := range []struct {
		name string
		cfg  mockserver.Config
		how  string
	}{
		{"automatic", mockserver.Config{}, mockserver.HowAuto},
		{"mapped", mockserver.Config{Map: map[string]string{newRedis: redisDst, "db.staging.invalid": mysqlDst}}, mockserver.HowMap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := mocktest.NewServer(t, tc.cfg, sessions...)
			c := replayRedis(t, srv.Addr(), newRedis, 4)
			d := &mocktest.Dialer{Mock: srv.Addr()}
			db := mysqlDBAt(t, d.DialContext, newMySQL, dbName, 4)
			got := make([]string, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					defer mocktest.Bind(fmt.Sprintf("moved-%d-%s", i, prefix))()
					got[i] = movedWork(ctx, c, db, prefix, i)
				})
			}
			wg.Wait()
			for i := range n {
				if got[i] != want[i] {
					t.Errorf("trace %d: replay got %q, recorded %q", i, got[i], want[i])
				}
			}
			byLive := map[string]mockserver.DestDecision{}
			for _, d := range srv.Destinations() {
				byLive[d.Live] = d
			}
			for live, recorded := range map[string]string{newRedis: redisDst, newMySQL: mysqlDst} {
				if d := byLive[live]; d.Recorded != recorded || d.How != tc.how {
					t.Errorf("%s: answered by %q (%s: %s), want %s by %s", live, d.Recorded, d.How, d.Reason, recorded, tc.how)
				}
			}
			var dests []mockserver.DestDecision
			getJSON(t, srv.AdminURL()+"/destinations", &dests)
			if len(dests) < 2 {
				t.Errorf("GET /destinations: %+v", dests)
			}
		})
	}
}

// A destination of no recording is refused at once, in its protocol: no
// client waits for a timeout.
func TestUnknownDestinationRefusedAtOnce(t *testing.T) {
	srv := mocktest.NewServer(t, mockserver.Config{})
	d := &mocktest.Dialer{Mock: srv.Addr()}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()

	c := goredis.NewClient(&goredis.Options{Addr: "nowhere.invalid:6379", Dialer: d.DialContext, MaxRetries: -1})
	defer c.Close()
	defer mocktest.Bind("unknown-redis")()
	if err := c.Set(ctx, "k", "v", 0).Err(); err == nil || !strings.Contains(err.Error(), "retrace") {
		t.Errorf("Redis SET to an unknown destination: %v, want the mock's error", err)
	}

	hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	resp, err := hc.Get("http://nowhere.invalid:8080/x")
	if err != nil {
		t.Fatalf("HTTP GET to an unknown destination: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "retrace") {
		t.Errorf("HTTP to an unknown destination: %d %q, want 502 from retrace", resp.StatusCode, body)
	}

	for _, addr := range []string{"nowhere.invalid:3306", "nowhere.invalid:4406"} {
		db := mysqlDBAt(t, d.DialContext, addr, "x", 1)
		var v int
		if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&v); err == nil {
			t.Errorf("MySQL query to %s: no error", addr)
		}
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("refusing four unknown destinations took %v", el)
	}
	var raw net.Conn
	raw, err = d.DialContext(ctx, "tcp", "nowhere.invalid:9999")
	if err != nil {
		t.Fatal(err)
	}
	raw.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := raw.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Errorf("a silent client of an unknown destination: %v, want the connection closed at once", err)
	}
	raw.Close()
}

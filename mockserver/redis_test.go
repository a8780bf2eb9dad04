package mockserver_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
)

const traces = 128

// redisWork is what one replayed request does with Redis: plain commands and
// a pipeline, all with values unique to the trace.
func redisWork(ctx context.Context, c *goredis.Client, prefix string, i int) (string, error) {
	key := fmt.Sprintf("%s:k:%d", prefix, i)
	if err := c.Set(ctx, key, fmt.Sprintf("v-%d-%s", i, prefix), 0).Err(); err != nil {
		return "", fmt.Errorf("SET: %w", err)
	}
	v, err := c.Get(ctx, key).Result()
	if err != nil {
		return "", fmt.Errorf("GET: %w", err)
	}
	var incr *goredis.IntCmd
	var hget *goredis.StringCmd
	var get *goredis.StringCmd
	_, err = c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		incr = p.IncrBy(ctx, key+":n", int64(i))
		p.HSet(ctx, key+":h", "f", fmt.Sprintf("h-%d", i))
		hget = p.HGet(ctx, key+":h", "f")
		get = p.Get(ctx, key)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("pipeline: %w", err)
	}
	if _, err := c.Get(ctx, key+":absent").Result(); err != goredis.Nil {
		return "", fmt.Errorf("GET absent: %v, want redis.Nil", err)
	}
	return fmt.Sprintf("%s|%d|%s|%s", v, incr.Val(), hget.Val(), get.Val()), nil
}

func TestRedis128ConcurrentTraces(t *testing.T) {
	ctx := context.Background()
	prefix := "retrace-mock-" + randHex(4)
	rec := mocktest.NewRecorder()
	real := recordingRedis(t, rec, "")
	want := make([]string, traces)
	run := func(c *goredis.Client, got []string) {
		var wg sync.WaitGroup
		for i := range traces {
			wg.Go(func() {
				defer mocktest.Bind(fmt.Sprintf("redis-%d-%s", i, prefix))()
				s, err := redisWork(ctx, c, prefix, i)
				if err != nil {
					s = "error: " + err.Error()
				}
				got[i] = s
			})
		}
		wg.Wait()
	}
	run(real, want)
	for i, w := range want {
		if w != fmt.Sprintf("v-%d-%s|%d|h-%d|v-%d-%s", i, prefix, i, i, i, prefix) {
			t.Fatalf("recording trace %d: %s", i, w)
		}
	}
	real.Close()
	sessions := rec.Sessions()
	if len(sessions) != traces {
		t.Fatalf("recorded %d sessions, want %d", len(sessions), traces)
	}
	srv := mocktest.NewServer(t, mockserver.Config{}, sessions...)
	got := make([]string, traces)
	run(replayRedis(t, srv.Addr(), testenv.RedisAddr(t), 8), got)
	for i := range traces {
		if got[i] != want[i] {
			t.Errorf("trace %d: replay got %q, recorded %q", i, got[i], want[i])
		}
	}
	for i := range traces {
		r := report(t, srv, fmt.Sprintf("redis-%d-%s", i, prefix))
		if m := missesOf(r); len(m) > 0 {
			t.Errorf("trace %d: missing mocks: %+v", i, m)
		}
		if len(r.Unused) != 0 {
			t.Errorf("trace %d: %d recorded calls unused", i, len(r.Unused))
		}
	}
}

// The same work with a RESP2 client (HELLO 2 or no HELLO at all).
func TestRedisRESP2Client(t *testing.T) {
	ctx := context.Background()
	prefix := "retrace-mock-r2-" + randHex(4)
	rec := mocktest.NewRecorder()
	real := goredis.NewClient(&goredis.Options{Addr: testenv.RedisAddr(t), Dialer: rec.Dialer("redis", ""), Protocol: 2})
	want := make([]string, 4)
	for i := range want {
		func() {
			defer mocktest.Bind(fmt.Sprintf("r2-%d-%s", i, prefix))()
			var err error
			if want[i], err = redisWork(ctx, real, prefix, i); err != nil {
				t.Fatal(err)
			}
		}()
	}
	real.Close()
	srv := mocktest.NewServer(t, mockserver.Config{}, rec.Sessions()...)
	d := &mocktest.Dialer{Mock: srv.Addr()}
	c := goredis.NewClient(&goredis.Options{Addr: testenv.RedisAddr(t), Dialer: d.DialContext, Protocol: 2, MaxRetries: -1})
	defer c.Close()
	for i := range want {
		func() {
			defer mocktest.Bind(fmt.Sprintf("r2-%d-%s", i, prefix))()
			if got, err := redisWork(ctx, c, prefix, i); got != want[i] || err != nil {
				t.Errorf("trace %d: %q, %v; recorded %q", i, got, err, want[i])
			}
		}()
	}
}

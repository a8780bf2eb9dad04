package main

import (
	"bytes"
	"context"
	"regexp"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
)

// syncBuffer is a bytes.Buffer safe for the command's and the test's
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestMockCommandServesRecordings runs retrace mock on recordings in a
// directory and in a Redis store (the two sources of the issue), and
// answers a Redis client from them.
func TestMockCommandServesRecordings(t *testing.T) {
	redisAddr := testenv.RedisAddr(t)
	prefix := "retrace-mock-cli-" + trace.NewID()[:8] + ":"
	t.Cleanup(func() { deleteKeys(t, redisAddr, prefix) })
	for name, src := range map[string]string{
		"directory": t.TempDir(),
		"redis":     "redis://" + redisAddr + "/0?prefix=" + prefix,
	} {
		t.Run(name, func(t *testing.T) { testMockCommand(t, redisAddr, src) })
	}
}

// deleteKeys removes the Redis keys that start with prefix.
func deleteKeys(t *testing.T, addr, prefix string) {
	ctx := context.Background()
	rc := goredis.NewClient(&goredis.Options{Addr: addr})
	defer rc.Close()
	keys, err := rc.Keys(ctx, prefix+"*").Result()
	if err == nil && len(keys) > 0 {
		err = rc.Del(ctx, keys...).Err()
	}
	if err != nil {
		t.Errorf("deleting the test's keys: %v", err)
	}
}

func testMockCommand(t *testing.T, redisAddr, src string) {
	ctx := context.Background()
	rec := mocktest.NewRecorder()
	rc := goredis.NewClient(&goredis.Options{Addr: redisAddr, Dialer: rec.Dialer("redis", "cli-trace")})
	if err := rc.Set(ctx, "retrace-mock-cli", "from-recording", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rc.Get(ctx, "retrace-mock-cli")
	rc.Close()
	store, err := recording.Open(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Write(ctx, rec.Sessions()); err != nil {
		t.Fatal(err)
	}
	store.Close()

	runCtx, cancel := context.WithCancel(ctx)
	var stderr syncBuffer
	p := &proc{Stdout: &stderr, Stderr: &stderr, Getenv: func(string) string { return "" }}
	done := make(chan int)
	go func() {
		done <- run(runCtx, p, []string{"mock", "--recordings", src, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--strategy", "redis,order"})
	}()
	re := regexp.MustCompile(`listening on (\S+), admin API (\S+)`)
	var addr string
	for i := 0; i < 500 && addr == ""; i++ {
		if m := re.FindStringSubmatch(stderr.String()); m != nil {
			addr = m[1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	if addr == "" {
		cancel()
		<-done
		t.Fatalf("no listening line; stderr:\n%s", stderr.String())
	}
	d := &mocktest.Dialer{Mock: addr, TID: "cli-trace"}
	c := goredis.NewClient(&goredis.Options{Addr: redisAddr, Dialer: d.DialContext, MaxRetries: -1})
	c.Set(ctx, "retrace-mock-cli", "from-recording", 0)
	v, err := c.Get(ctx, "retrace-mock-cli").Result()
	c.Close()
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit status %d; stderr:\n%s", code, stderr.String())
	}
	if v != "from-recording" || err != nil {
		t.Fatalf("GET through retrace mock: %q, %v; stderr:\n%s", v, err, stderr.String())
	}
	if !regexp.MustCompile(`loaded 1 sessions`).MatchString(stderr.String()) {
		t.Errorf("no progress line; stderr:\n%s", stderr.String())
	}
}

func TestMockCommandUsageErrors(t *testing.T) {
	for name, args := range map[string][]string{
		"no recordings": {"mock"},
		"bad strategy":  {"mock", "--recordings", t.TempDir(), "--strategy", "nearest"},
		"bad per-dst":   {"mock", "--recordings", t.TempDir(), "--strategy-for", "nodst"},
		"missing dir":   {"mock", "--recordings", t.TempDir() + "/absent"},
	} {
		t.Run(name, func(t *testing.T) {
			var out syncBuffer
			p := &proc{Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }}
			if code := run(context.Background(), p, args); code != 2 {
				t.Fatalf("exit status %d, want 2; output:\n%s", code, out.String())
			}
		})
	}
}

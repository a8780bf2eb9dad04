package redis_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/redis"
	"github.com/retrace-dev/retrace/wire/wiretest"
)

func cmd(args ...string) []byte { return redis.Command(args...) }

// A GET k on a connection that selected database 1 is matched with the
// GET k recorded in database 1, whether the SELECT is in the same
// recording or in the set-up another recording (or the background) holds
// of the connection; HELLO 3 is not the RESP2 hello.
func TestSessionFollowsSelectedDB(t *testing.T) {
	b := redis.Protocol.NewBook()
	setup := wire.Call{Conn: 7, Setup: true, Request: append(cmd("HELLO", "3"), cmd("SELECT", "1")...),
		Response: []byte("%1\r\n$5\r\nproto\r\n:3\r\n+OK\r\n")}
	b.Learn(setup) // in the background session

	// this recording uses connection 7 (set up elsewhere) and 8 (fresh)
	s := redis.Protocol.NewSession(b)
	u7 := s.Units(wire.Call{Conn: 7, Request: cmd("GET", "k"), Response: []byte("$2\r\nv1\r\n")})
	u8 := s.Units(wire.Call{Conn: 8, Request: cmd("GET", "k"), Response: []byte("$2\r\nv0\r\n")})
	if u7[0].Req.Op != "GET db=1" || u8[0].Req.Op != "GET" || u7[0].Req.Key != "k" {
		t.Fatalf("ops %q %q, key %q", u7[0].Req.Op, u8[0].Req.Op, u7[0].Req.Key)
	}
	// a pipeline that selects on the way
	u9 := s.Units(wire.Call{Conn: 9, Request: append(append(cmd("GET", "a"), cmd("SELECT", "2")...), cmd("GET", "a")...),
		Response: []byte("$-1\r\n+OK\r\n$1\r\nx\r\n")})
	if len(u9) != 3 || u9[0].Req.Op != "GET" || u9[1].Req.Op != "SELECT" || u9[2].Req.Op != "GET db=2" {
		t.Fatalf("pipeline units %+v", u9)
	}
	// a SELECT the server refused changes nothing
	u10 := s.Units(wire.Call{Conn: 10, Setup: true, Request: cmd("SELECT", "99"), Response: []byte("-ERR DB index is out of range\r\n")})
	u10 = append(u10, s.Units(wire.Call{Conn: 10, Request: cmd("GET", "k"), Response: []byte("$-1\r\n")})...)
	if u10[1].Req.Op != "GET" {
		t.Fatalf("after a refused SELECT: %q", u10[1].Req.Op)
	}
	hello := s.Units(setup)
	if hello[0].Req.Op != "HELLO 3" {
		t.Fatalf("hello op %q", hello[0].Req.Op)
	}
}

// The live side: the answerer follows SELECT and HELLO as it answers
// them, and answers a RESP2 connection in RESP2.
func TestAnswererFollowsState(t *testing.T) {
	a := redis.Protocol.NewAnswerer(wire.Env{Book: redis.Protocol.NewBook(), MaxMessage: 1 << 20})
	next := func(b []byte) wire.Request {
		r, n, _, err := a.Next(b)
		if err != nil || n != len(b) {
			t.Fatalf("%q: %d %v", b, n, err)
		}
		return r
	}
	resp3 := []byte("%2\r\n$1\r\na\r\n,1.5\r\n$1\r\nb\r\n_\r\n")
	r := next(cmd("HGETALL", "h"))
	if got := string(a.Reply(&r, resp3)); got != "*4\r\n$1\r\na\r\n$3\r\n1.5\r\n$1\r\nb\r\n$-1\r\n" {
		t.Fatalf("RESP2 connection answered %q", got)
	}
	r = next(cmd("SELECT", "3"))
	if !r.Setup {
		t.Fatal("SELECT is set-up")
	}
	a.Reply(&r, []byte("+OK\r\n"))
	if r = next(cmd("GET", "k")); r.Op != "GET db=3" {
		t.Fatalf("after SELECT 3: %q", r.Op)
	}
	r = next(cmd("HELLO", "3"))
	if r.Op != "HELLO 3" {
		t.Fatalf("hello op %q", r.Op)
	}
	if got := a.Synth(&r); got[0] != '%' {
		t.Fatalf("HELLO 3 synthesised %q", got)
	}
	r = next(cmd("HGETALL", "h"))
	if got := string(a.Reply(&r, resp3)); got != string(resp3) {
		t.Fatalf("RESP3 connection answered %q", got)
	}
	r = next(cmd("RESET"))
	a.Reply(&r, []byte("+RESET\r\n"))
	if r = next(cmd("GET", "k")); r.Op != "GET" {
		t.Fatalf("after RESET: %q", r.Op)
	}
}

func TestToRESP2(t *testing.T) {
	for in, want := range map[string]string{
		"+OK\r\n":            "+OK\r\n",
		"~2\r\n:1\r\n#t\r\n": "*2\r\n:1\r\n:1\r\n",
		">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n(12345678901234567890\r\n": "*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$20\r\n12345678901234567890\r\n",
		"=8\r\ntxt:abcd\r\n":              "$4\r\nabcd\r\n",
		"!10\r\nERR a\r\nbc.\r\n":         "-ERR a  bc.\r\n",
		"|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n": "$1\r\nv\r\n",
		"*-1\r\n":                         "*-1\r\n",
		"#f\r\n_\r\n":                     ":0\r\n$-1\r\n",
		"%1\r\n+a\r\n%1\r\n+b\r\n~0\r\n":  "*2\r\n+a\r\n*2\r\n+b\r\n*0\r\n",
		"$4\r\nab":                        "$4\r\nab",
	} {
		if got := string(redis.ToRESP2([]byte(in))); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func FuzzToRESP2(f *testing.F) {
	for _, s := range []string{"%1\r\n+a\r\n:1\r\n", "|1\r\n+a\r\n+b\r\n_\r\n", "~1\r\n,1e3\r\n", "=5\r\ntxt:x\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		out := redis.ToRESP2(b)
		if n, err := redis.ReplyLen(b); err == nil && n == len(b) {
			if m, err := redis.ReplyLen(out); err != nil || m != len(out) {
				t.Fatalf("%q made %q, not one whole reply (%d, %v)", b, out, m, err)
			}
			if string(redis.ToRESP2(out)) != string(out) {
				t.Fatalf("%q is not RESP2 yet", out)
			}
		}
	})
}

// stateClient calls a pool of RESP3 connections to database 1 and one of
// RESP2 connections to database 0, on the same keys: a request's answer
// from each database must be its own.
type stateClient struct {
	db0, db1 *goredis.Client
	prefix   string
}

func (c stateClient) Call(ctx context.Context, i, n int) (string, error) {
	key := fmt.Sprintf("%s:%d", c.prefix, i)
	switch n {
	case 0:
		tag := trace.NewID()[:6]
		if err := c.db0.Set(ctx, key, "db0-"+tag, 0).Err(); err != nil {
			return "", err
		}
		if err := c.db1.HSet(ctx, key+":h", "f", "db1-"+tag, "g", i).Err(); err != nil {
			return "", err
		}
		return c.db1.Set(ctx, key, "db1-"+tag, 0).Result()
	case 1:
		// the same GET in both databases at once: which reaches the
		// server (or the mock) first differs from run to run
		var v1 string
		var err1 error
		done := make(chan struct{})
		go func() {
			defer close(done)
			v1, err1 = c.db1.Get(ctx, key).Result()
		}()
		v0, err := c.db0.Get(ctx, key).Result()
		<-done
		if err == nil {
			err = err1
		}
		return v0 + "/" + v1, err
	}
	h, err := c.db1.HGetAll(ctx, key+":h").Result() // a RESP3 map
	if err != nil {
		return "", err
	}
	var kv []string
	for k, v := range h {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	v, err := c.db0.Get(ctx, key).Result()
	return strings.Join(kv, ",") + ";" + v, err
}

func (c stateClient) Close() { c.db0.Close(); c.db1.Close() }

// Many concurrent traces on two pools, one in database 1 over RESP3 and
// one in database 0 over RESP2, the same keys in both: recorded against
// redis-server, replayed with it stopped, every answer as recorded.
func TestRecordReplaySelectedDBAndRESP3(t *testing.T) {
	relay := wiretest.NewRelay(t, testenv.RedisAddr(t))
	prefix := "retrace-state-" + trace.NewID()[:8]
	wiretest.RecordReplay(t, wiretest.Scenario{Proto: redis.Name, Dst: relay.Addr(), Stop: relay.Close,
		NewClient: func(dst string) wiretest.Client {
			return stateClient{
				db0:    goredis.NewClient(&goredis.Options{Addr: dst, PoolSize: 3, Protocol: 2, MaxRetries: -1}),
				db1:    goredis.NewClient(&goredis.Options{Addr: dst, PoolSize: 3, DB: 1, Protocol: 3, MaxRetries: -1}),
				prefix: prefix,
			}
		}})
}

package redis_test

import (
	"context"
	"fmt"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire/redis"
	"github.com/retrace-dev/retrace/wire/wiretest"
)

var samples = []wiretest.Sample{{
	Name: "commands",
	Exchanges: []wiretest.Exchange{
		{Request: []byte("*2\r\n$4\r\nAUTH\r\n$6\r\nsecret\r\n"), Response: []byte("+OK\r\n"), Setup: true},
		{Request: []byte("*2\r\n$6\r\nSELECT\r\n$1\r\n2\r\n"), Response: []byte("+OK\r\n"), Setup: true},
		{Request: []byte("*3\r\n$3\r\nSET\r\n$4\r\ncart\r\n$2\r\n42\r\n"), Response: []byte("+OK\r\n")},
		{Request: []byte("*2\r\n$3\r\nGET\r\n$4\r\ncart\r\n"), Response: []byte("$2\r\n42\r\n")},
		{Request: []byte("GET cart\r\n"), Response: []byte("$2\r\n42\r\n")},
		{Request: []byte("*2\r\n$7\r\nHGETALL\r\n$1\r\nh\r\n"), Response: []byte("%1\r\n$1\r\na\r\n:1\r\n")},
		{Request: []byte("*2\r\n$3\r\nGET\r\n$7\r\nmissing\r\n"), Response: []byte("$-1\r\n")},
	},
}, {
	Name: "inline set-up",
	Exchanges: []wiretest.Exchange{
		{Request: []byte("PING\r\n"), Response: []byte("+PONG\r\n"), Setup: true},
		{Request: []byte("INCR n\r\n"), Response: []byte(":1\r\n")},
	},
}}

func TestConformance(t *testing.T) { wiretest.Conform(t, redis.Protocol, samples...) }

func FuzzFramers(f *testing.F) { wiretest.FuzzFramers(f, redis.Protocol, samples...) }

// goRedis is a wiretest.Client over go-redis's pool: RESP arrays.
type goRedis struct {
	c      *goredis.Client
	prefix string
}

func (g goRedis) Call(ctx context.Context, i, n int) (string, error) {
	key := fmt.Sprintf("%s:%d", g.prefix, i)
	switch n {
	case 0:
		return g.c.Set(ctx, key, fmt.Sprintf("v%d-%s", i, trace.NewID()[:6]), 0).Result()
	case 1:
		return g.c.Get(ctx, key).Result()
	}
	v, err := g.c.IncrBy(ctx, key+":n", int64(i)).Result()
	return fmt.Sprint(v), err
}

func (g goRedis) Close() { g.c.Close() }

func TestRecordReplay(t *testing.T) {
	relay := wiretest.NewRelay(t, testenv.RedisAddr(t))
	prefix := "retrace-wiretest-" + trace.NewID()[:8]
	wiretest.RecordReplay(t, wiretest.Scenario{Proto: redis.Name, Dst: relay.Addr(), Stop: relay.Close,
		NewClient: func(dst string) wiretest.Client {
			return goRedis{c: goredis.NewClient(&goredis.Options{Addr: dst, PoolSize: 4, MaxRetries: -1}), prefix: prefix}
		}})
}

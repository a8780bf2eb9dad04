package redis_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire/redis"
	"github.com/retrace-dev/retrace/wire/wiretest"
)

var cardRule = regexp.MustCompile(`\b(?:\d[\s-]?){12,18}\d\b`)

type redisCards struct {
	c      *goredis.Client
	prefix string
}

func (r redisCards) Call(ctx context.Context, i, n int) (string, error) {
	key := fmt.Sprintf("%s:%d", r.prefix, i)
	card := fmt.Sprintf("card 4111111111111111 #%d", i)
	switch n {
	case 0:
		return r.c.Set(ctx, key, card, 0).Result()
	case 1:
		return r.c.Get(ctx, key).Result()
	}
	if err := r.c.HSet(ctx, key+":h", "card", card).Err(); err != nil {
		return "", err
	}
	h, err := r.c.HGetAll(ctx, key+":h").Result()
	return h["card"], err
}

func (r redisCards) Close() { r.c.Close() }

// A recording masked by a regex rule that changes the length of command
// arguments and replies replays: go-redis (RESP3) reads every masked
// reply and gets the masked values.
func TestMaskedRecordReplay(t *testing.T) {
	relay := wiretest.NewRelay(t, testenv.RedisAddr(t))
	prefix := "retrace-mask-" + trace.NewID()[:8]
	mask, err := recording.ParseMasker(strings.NewReader(`regex \b(?:\d[\s-]?){12,18}\d\b [card]`+"\n"), "rules")
	if err != nil {
		t.Fatal(err)
	}
	wiretest.RecordReplay(t, wiretest.Scenario{Proto: redis.Name, Dst: relay.Addr(), Stop: relay.Close,
		Mask: mask, Masked: func(s string) string { return cardRule.ReplaceAllString(s, "[card]") },
		NewClient: func(dst string) wiretest.Client {
			return redisCards{c: goredis.NewClient(&goredis.Options{Addr: dst, PoolSize: 4, Protocol: 3, MaxRetries: -1}), prefix: prefix}
		}})
}

package redis_test

import (
	"testing"

	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/redis"
	"github.com/retrace-dev/retrace/wire/wiretest"
)

func maskRules() *wiretest.Rules {
	return &wiretest.Rules{Patterns: []wiretest.Pattern{
		wiretest.Pat(`\b(?:\d[\s-]?){12,18}\d\b`, "[card]"),
		wiretest.Pat(`(?i)(bearer\s+)[A-Za-z0-9._-]+`, "${1}[token]"),
	}}
}

var maskCases = []wiretest.MaskCase{
	{Name: "command arguments, lengths fixed",
		In:   []byte("*3\r\n$3\r\nSET\r\n$4\r\ncard\r\n$19\r\n4111 1111 1111 1111\r\n"),
		Want: []byte("*3\r\n$3\r\nSET\r\n$4\r\ncard\r\n$6\r\n[card]\r\n")},
	{Name: "pipeline", In: []byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*2\r\n$4\r\nECHO\r\n$12\r\nBearer abc.d\r\n"),
		Want: []byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*2\r\n$4\r\nECHO\r\n$14\r\nBearer [token]\r\n")},
	{Name: "inline command", In: []byte("SET c 4111111111111111\r\n"), Want: []byte("SET c [card]\r\n")},
	{Name: "RESP3 replies", Side: wire.Server,
		In:   []byte("%2\r\n+card\r\n$16\r\n4111111111111111\r\n+tok\r\n=16\r\ntxt:Bearer x.y.z\r\n_\r\n:42\r\n$-1\r\n-ERR Bearer qq\r\n"),
		Want: []byte("%2\r\n+card\r\n$6\r\n[card]\r\n+tok\r\n=18\r\ntxt:Bearer [token]\r\n_\r\n:42\r\n$-1\r\n-ERR Bearer [token]\r\n")},
	{Name: "nothing to mask", In: []byte("*2\r\n$3\r\nGET\r\n$4\r\ncart\r\n"), Want: []byte("*2\r\n$3\r\nGET\r\n$4\r\ncart\r\n")},
	{Name: "cut by the cap: the rest as text", Side: wire.Server,
		In: []byte("*2\r\n$16\r\n4111111111111111\r\n$40\r\n4111111111111111 and mo"), Want: []byte("*2\r\n$6\r\n[card]\r\n$40\r\n[card] and mo")},
}

func TestMask(t *testing.T) {
	m, ok := redis.Protocol.(wire.Masker)
	if !ok {
		t.Fatal("redis.Protocol is no wire.Masker")
	}
	wiretest.Masks(t, m, maskRules, maskCases...)
}

func FuzzMask(f *testing.F) {
	wiretest.FuzzMasker(f, redis.Protocol.(wire.Masker), maskRules, wiretest.Whole(redis.Protocol), maskCases...)
}

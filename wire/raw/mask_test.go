package raw_test

import (
	"testing"

	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/raw"
	"github.com/retrace-dev/retrace/wire/wiretest"
)

func maskRules() *wiretest.Rules {
	return &wiretest.Rules{Patterns: []wiretest.Pattern{wiretest.Pat(`tok=\w+`, "tok=***")}}
}

var maskCases = []wiretest.MaskCase{
	{Name: "patterns over the bytes", In: []byte("GET k tok=abc\n"), Want: []byte("GET k tok=***\n")},
	{Name: "binary", Side: wire.Server, In: []byte{0, 1, 't', 'o', 'k', '=', 'z', 0xff}, Want: []byte{0, 1, 't', 'o', 'k', '=', '*', '*', '*', 0xff}},
	{Name: "nothing", In: []byte("PING\n"), Want: []byte("PING\n")},
}

func TestMask(t *testing.T) { wiretest.Masks(t, raw.Protocol.(wire.Masker), maskRules, maskCases...) }

func FuzzMask(f *testing.F) {
	wiretest.FuzzMasker(f, raw.Protocol.(wire.Masker), maskRules, nil, maskCases...)
}

package capture

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestArenaKeepsPayloadsApart adds random pieces to interleaved payloads,
// small and large, taking views along the way: every payload must hold
// exactly its own bytes in order, and no view may change afterwards.
func TestArenaKeepsPayloadsApart(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var ar arena
	ps := make([]payload, 8)
	want := make([][]byte, len(ps))
	type snap struct{ view, want []byte }
	var snaps []snap
	for i := range 5000 {
		k := rng.IntN(len(ps))
		if rng.IntN(50) == 0 {
			k = 0 // one payload grows past arenaMax
		}
		piece := make([]byte, 1+rng.IntN(300))
		for j := range piece {
			piece[j] = byte(i + j)
		}
		ps[k].add(piece, -1, &ar)
		want[k] = append(want[k], piece...)
		if rng.IntN(10) == 0 {
			snaps = append(snaps, snap{ps[k].view(), bytes.Clone(want[k])})
		}
	}
	for k := range ps {
		require.Equal(t, want[k], ps[k].b, "payload %d", k)
	}
	for i, s := range snaps {
		require.Equal(t, s.want, s.view, "view %d changed", i)
	}
}

func TestPayloadCap(t *testing.T) {
	var ar arena
	var p payload
	p.add([]byte("hello "), 8, &ar)
	p.add([]byte("world"), 8, &ar)
	p.add([]byte("!"), 8, &ar)
	require.Equal(t, "hello wo", string(p.b))
	require.True(t, p.truncated)
	require.EqualValues(t, 12, p.n)
}

func BenchmarkPayloadAdd(b *testing.B) {
	piece := bytes.Repeat([]byte("x"), 40)
	b.ReportAllocs()
	for b.Loop() {
		var ar arena
		var req, resp [8]payload
		for i := range 8 {
			req[i].add(piece, -1, &ar)
			resp[i].add(piece, -1, &ar)
			resp[i].add(piece, -1, &ar)
		}
	}
}

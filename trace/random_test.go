package trace

import (
	"bytes"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRandomStreams: the same seed gives the same draws, per source, and
// the two sources and other seeds give others; goroutines drawing at once
// get distinct draws numbered without gaps.
func TestRandomStreams(t *testing.T) {
	draw := func(r *Random, s MathSource, n int) []uint64 {
		var out []uint64
		for range n {
			v, ok := r.Uint64(s)
			require.True(t, ok)
			out = append(out, v)
		}
		return out
	}
	a := draw(NewRecordRandom(42, false), MathRand, 100)
	require.Equal(t, a, draw(NewReplayRandom(&ReplaySeed{Seed: 42}, nil, false), MathRand, 100))
	require.NotEqual(t, a, draw(NewRecordRandom(42, false), MathRandV2, 100))
	require.NotEqual(t, a, draw(NewRecordRandom(43, false), MathRand, 100))

	r := NewRecordRandom(7, false)
	seen := sync.Map{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for _, v := range draw(r, MathRandV2, 1000) {
				if _, dup := seen.LoadOrStore(v, true); dup {
					t.Errorf("draw %d came twice", v)
				}
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 8000, r.MathDraws(MathRandV2))
	require.Zero(t, r.MathDraws(MathRand))
}

// TestRandomReplayLimits: a replay draws its recorded math draws from the
// seed, then real randomness, noting the first draw beyond; crypto draws
// come back in order until the recording ends or a length differs; each
// source diverges once, OnDiverge told each time.
func TestRandomReplayLimits(t *testing.T) {
	var told []Divergence
	r := NewReplayRandom(&ReplaySeed{Seed: 1, Draws: &[2]uint64{2, 0}}, [][]byte{{1, 2}, {3}}, true)
	r.TraceID = "t1"
	r.OnDiverge = func(tid string, d Divergence) {
		require.Equal(t, "t1", tid)
		told = append(told, d)
	}
	for i := range 4 {
		_, ok := r.Uint64(MathRand)
		require.Equal(t, i < 2, ok, "draw %d", i+1)
	}
	_, ok := r.Uint64(MathRandV2)
	require.False(t, ok)
	p := make([]byte, 2)
	require.True(t, r.Replay(p))
	require.Equal(t, []byte{1, 2}, p)
	require.False(t, r.Replay(make([]byte, 4)), "recorded 1 byte, drawn 4")
	require.False(t, r.Replay(make([]byte, 1)))
	want := []Divergence{
		{Source: "math/rand", Draw: 3, Reason: "beyond the recording (2 draws recorded); real randomness"},
		{Source: "math/rand/v2", Draw: 1, Reason: "beyond the recording (0 draws recorded); real randomness"},
		{Source: "crypto/rand", Draw: 2, Reason: "4 bytes drawn, 1 recorded; real randomness"},
	}
	require.Equal(t, want, r.Divergences())
	require.Equal(t, want, told)
	require.Nil(t, r.Draws(), "a replay records nothing")

	bare := NewReplayRandom(nil, nil, false)
	_, ok = bare.Uint64(MathRand)
	require.False(t, ok)
	require.Equal(t, []Divergence{{Source: "math/rand", Draw: 1, Reason: "the recording has no seed; real randomness"}}, bare.Divergences())
}

// TestRandomRecord: record mode keeps copies of the crypto draws in order,
// an empty one as empty, and replays nothing.
func TestRandomRecord(t *testing.T) {
	r := NewRecordRandom(9, true)
	b := []byte{5, 6}
	require.False(t, r.Replay(b))
	r.Record(b)
	r.Record(nil)
	b[0] = 0
	require.Equal(t, [][]byte{{5, 6}, {}}, r.Draws())
	require.Empty(t, r.Divergences())
}

func TestReplaySeedParse(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     ReplaySeed
		bad      bool
	}{
		{name: "seed", in: "18446744073709551615", want: ReplaySeed{Seed: 1<<64 - 1}},
		{name: "with draws", in: " 5/3/0 ", want: ReplaySeed{Seed: 5, Draws: &[2]uint64{3, 0}}},
		{name: "two parts", in: "5/3", bad: true},
		{name: "negative", in: "-5", bad: true},
		{name: "empty", in: "", bad: true},
		{name: "over 64 bits", in: "18446744073709551616", bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseReplaySeed(tc.in)
			if tc.bad {
				require.ErrorContains(t, err, "Retrace-Replay-Seed")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	_, err := ParseReplayRandom("AQID,%%%")
	require.ErrorContains(t, err, "draw 2 is not base64")
	d, err := ParseReplayRandom(" ")
	require.NoError(t, err)
	require.Nil(t, d)
}

// FuzzReplayHeaders: what AppendReplayRandom and ReplaySeed.String write
// parses back as written; any other input parses or fails with an error,
// never a panic.
func FuzzReplayHeaders(f *testing.F) {
	f.Add(uint64(0), uint64(0), uint64(0), []byte{}, []byte{0})
	f.Add(uint64(1<<63), uint64(3), uint64(1), []byte("draw"), []byte{0xff, 0xfe, 0})
	f.Fuzz(func(t *testing.T, seed, n1, n2 uint64, a, b []byte) {
		s := ReplaySeed{Seed: seed, Draws: &[2]uint64{n1, n2}}
		got, err := ParseReplaySeed(s.String())
		if err != nil || got.Seed != seed || *got.Draws != *s.Draws {
			t.Fatalf("seed %+v: %+v %v", s, got, err)
		}
		draws := [][]byte{a, b}
		back, err := ParseReplayRandom(string(AppendReplayRandom(nil, draws)))
		if err != nil || len(back) != 2 || !bytes.Equal(back[0], a) || !bytes.Equal(back[1], b) {
			t.Fatalf("draws %q: %q %v", draws, back, err)
		}
		ParseReplaySeed(string(a))
		ParseReplayRandom(string(a))
	})
}

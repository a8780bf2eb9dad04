package hook

import (
	crand "crypto/rand"
	"log/slog"
	mrand "math/rand"
	mrand2 "math/rand/v2"
	"testing"

	"github.com/retrace-dev/retrace/trace"
)

var (
	sinkU64 uint64
	sinkI64 int64
)

// BenchmarkRandomDraw measures one draw from each patched source against
// the unpatched call in the same run: unhooked (RETRACE_RANDOM=off), on an
// untraced goroutine while no traced request is live (one atomic load),
// untraced while one is (plus the goroutine's trace lookup), and on a
// traced goroutine (the seeded stream, or the recorded crypto draw, after
// telling the application's draw from the standard library's by the
// stack).
func BenchmarkRandomDraw(b *testing.B) {
	sources := []struct {
		name string
		draw func()
	}{
		{"math-rand-v2.Uint64", func() { sinkU64 = mrand2.Uint64() }},
		{"math-rand.Int63", func() { sinkI64 = mrand.Int63() }},
		{"crypto-rand.Read-16", func() { var p [16]byte; crand.Read(p[:]) }},
	}
	cases := []struct {
		name         string
		random       RandomMode
		live, traced bool
		replay       bool
	}{
		{name: "unhooked", random: RandomOff},
		{name: "untraced", random: RandomAll},
		{name: "untraced-others-live", random: RandomAll, live: true},
		{name: "traced-record", random: RandomAll, traced: true},
		{name: "traced-replay", random: RandomAll, traced: true, replay: true},
	}
	for _, src := range sources {
		for _, c := range cases {
			b.Run(src.name+"/"+c.name, func(b *testing.B) {
				undo, err := Install(Config{Mode: Record, Recorder: nopRecorder{}, Random: c.random, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				defer undo()
				if c.live {
					// another request's trace, with randomness, bound on a
					// goroutine of its own
					bound, release := make(chan struct{}), make(chan struct{})
					go func() {
						defer trace.Bind(&trace.Trace{ID: "other", Random: trace.NewRecordRandom(2, true)})()
						close(bound)
						<-release
					}()
					<-bound
					defer close(release)
				}
				if c.traced {
					rnd := trace.NewRecordRandom(1, true)
					if c.replay {
						draws := make([][]byte, b.N)
						for i := range draws {
							draws[i] = make([]byte, 16)
						}
						rnd = trace.NewReplayRandom(&trace.ReplaySeed{Seed: 1}, draws, true)
					}
					defer trace.Bind(&trace.Trace{ID: "bench", Random: rnd})()
				}
				b.ReportAllocs()
				for b.Loop() {
					src.draw()
				}
			})
		}
	}
}

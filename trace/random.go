package trace

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// MathSource names a global random source of the standard library whose
// draws on a request's goroutines come from the request's seed.
type MathSource uint8

const (
	// MathRand is math/rand's global source (Int, Intn, Float64, …).
	MathRand MathSource = iota
	// MathRandV2 is math/rand/v2's global source (IntN, Uint64, N, …).
	MathRandV2
	mathSources
)

func (s MathSource) String() string {
	switch s {
	case MathRand:
		return "math/rand"
	case MathRandV2:
		return "math/rand/v2"
	}
	return fmt.Sprintf("MathSource(%d)", int(s))
}

// CryptoSource is the name of crypto/rand in divergences and recordings.
const CryptoSource = "crypto/rand"

// MaxReplayRandom bounds the Retrace-Replay-Random header value the
// inbound parser keeps (64 KiB of base64, 48 KiB of draws); a longer one
// is stripped and ignored, and the request's crypto draws diverge.
const MaxReplayRandom = 64 << 10

// Random is one request's randomness (RETRACE_RANDOM, DESIGN.md 14): the
// seed its math/rand and math/rand/v2 draws come from, and its crypto/rand
// draws, recorded as they are made (record mode) or handed back in order
// (replay). Every goroutine of the request draws from it, so it is safe
// for concurrent use; draws of goroutines that race each other come in
// the order they happen to run.
type Random struct {
	// Seed is the seed of the math sources; valid when Seeded.
	Seed   uint64
	Seeded bool
	// Crypto says whether crypto/rand draws are recorded or replayed
	// (RETRACE_RANDOM=all).
	Crypto bool
	// TraceID names the request in OnDiverge.
	TraceID string
	// OnDiverge, when set (before the first draw), is called with each
	// divergence as it is noted, on the goroutine that drew, with no lock
	// held.
	OnDiverge func(tid string, d Divergence)

	base [mathSources]uint64        // per source, the stream derived from Seed
	n    [mathSources]atomic.Uint64 // per source, draws made
	// limit is, in replay, the draws the recording made per source; 0
	// with !limited means no limit (a seed sent without counts)
	limit   [mathSources]uint64
	limited bool

	mu        sync.Mutex // guards what follows
	replaying bool       // replay: draws holds the recorded draws, handed out from next
	draws     [][]byte
	next      int
	diverged  []Divergence
}

// Divergence is where a replayed request's randomness stopped following
// its recording: from this draw on, the source gave real randomness.
type Divergence struct {
	Source string `json:"source"` // "math/rand", "math/rand/v2" or "crypto/rand"
	Draw   int    `json:"draw"`   // number of the draw, from 1
	Reason string `json:"reason"`
}

func (d Divergence) String() string {
	return fmt.Sprintf("%s draw %d: %s", d.Source, d.Draw, d.Reason)
}

// NewRecordRandom returns the randomness of a request being recorded:
// math draws from seed, crypto draws kept when crypto is set.
func NewRecordRandom(seed uint64, crypto bool) *Random {
	r := &Random{}
	r.InitRecord(seed, crypto)
	return r
}

// InitRecord makes the zero Random r what NewRecordRandom returns, in
// place (the agent allocates it with its trace).
func (r *Random) InitRecord(seed uint64, crypto bool) {
	r.Seed, r.Seeded, r.Crypto = seed, true, crypto
	r.derive()
}

// ReplaySeed is what a replayed request carries of its recording's math
// randomness (Retrace-Replay-Seed).
type ReplaySeed struct {
	Seed uint64
	// Draws is the number of draws the recorded request made per source;
	// nil when unknown (then draws are not limited).
	Draws *[2]uint64
}

// NewReplayRandom returns the randomness of a replayed request: math draws
// from the recorded seed up to the recorded number of draws (none when
// seed is nil: they get real randomness), crypto draws handed back from
// recorded, in order. Where a source leaves its recording, it gets real
// randomness from then on and the divergence is noted.
func NewReplayRandom(seed *ReplaySeed, recorded [][]byte, crypto bool) *Random {
	r := &Random{}
	r.InitReplay(seed, recorded, crypto)
	return r
}

// InitReplay makes the zero Random r what NewReplayRandom returns, in
// place.
func (r *Random) InitReplay(seed *ReplaySeed, recorded [][]byte, crypto bool) {
	r.Crypto, r.replaying, r.draws = crypto, true, recorded
	if seed != nil {
		r.Seed, r.Seeded = seed.Seed, true
		if seed.Draws != nil {
			r.limit, r.limited = *seed.Draws, true
		}
	}
	r.derive()
}

func (r *Random) derive() {
	for s := range r.base {
		r.base[s] = splitMix(r.Seed^0x6a09e667f3bcc908, uint64(s)+1)
	}
}

// splitMix is the i-th output of SplitMix64 started at seed: a stream
// whose draws each cost one multiply-xorshift chain and no state but a
// counter, so concurrent goroutines of a request need no lock.
func splitMix(seed, i uint64) uint64 {
	z := seed + i*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Uint64 returns the next draw of source s and true, or false when a
// replayed request has no seed (its recording was made without one) or
// draws beyond its recording: the caller then draws real randomness, and
// the first such draw is noted as a divergence.
func (r *Random) Uint64(s MathSource) (uint64, bool) {
	i := r.n[s].Add(1)
	if !r.Seeded {
		if i == 1 {
			r.diverge(Divergence{Source: s.String(), Draw: 1, Reason: "the recording has no seed; real randomness"})
		}
		return 0, false
	}
	if r.limited && i > r.limit[s] {
		if i == r.limit[s]+1 {
			r.diverge(Divergence{Source: s.String(), Draw: int(i),
				Reason: fmt.Sprintf("beyond the recording (%d draws recorded); real randomness", r.limit[s])})
		}
		return 0, false
	}
	return splitMix(r.base[s], i), true
}

// MathDraws returns the number of draws made from source s so far.
func (r *Random) MathDraws(s MathSource) uint64 { return r.n[s].Load() }

// Replay fills p with the next recorded crypto draw and reports true, in
// replay mode. It reports false (p untouched) in record mode, and when the
// recording has no more draws or its next one has another length: the
// caller then fills p with real randomness; the divergence is noted, once
// for the request (the draws after it are off anyway).
func (r *Random) Replay(p []byte) bool {
	r.mu.Lock()
	if !r.replaying {
		r.mu.Unlock()
		return false
	}
	k := r.next
	r.next++
	var d Divergence
	switch {
	case k >= len(r.draws):
		d = Divergence{Source: CryptoSource, Draw: k + 1,
			Reason: fmt.Sprintf("beyond the recording (%d draws recorded); real randomness", len(r.draws))}
	case len(r.draws[k]) != len(p):
		d = Divergence{Source: CryptoSource, Draw: k + 1,
			Reason: fmt.Sprintf("%d bytes drawn, %d recorded; real randomness", len(p), len(r.draws[k]))}
	default:
		copy(p, r.draws[k])
		r.mu.Unlock()
		return true
	}
	first := r.divergeLocked(d)
	r.mu.Unlock()
	if first && r.OnDiverge != nil {
		r.OnDiverge(r.TraceID, d)
	}
	return false
}

// Record keeps a copy of a crypto draw, in record mode.
func (r *Random) Record(p []byte) {
	r.mu.Lock()
	if !r.replaying {
		r.draws = append(r.draws, append([]byte{}, p...)) // an empty draw stays empty, not nil
	}
	r.mu.Unlock()
}

// Draws returns the crypto draws recorded so far (record mode).
func (r *Random) Draws() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.replaying {
		return nil
	}
	return append([][]byte(nil), r.draws...)
}

func (r *Random) diverge(d Divergence) {
	r.mu.Lock()
	first := r.divergeLocked(d)
	r.mu.Unlock()
	if first && r.OnDiverge != nil {
		r.OnDiverge(r.TraceID, d)
	}
}

// divergeLocked notes d unless its source diverged before (a source's
// first divergence is the one that matters, the draws after it are off
// anyway), and reports whether it did.
func (r *Random) divergeLocked(d Divergence) bool {
	for _, o := range r.diverged {
		if o.Source == d.Source {
			return false
		}
	}
	r.diverged = append(r.diverged, d)
	return true
}

// Divergences returns where the request's randomness left its recording,
// one entry per source at most, in the order they happened.
func (r *Random) Divergences() []Divergence {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Divergence(nil), r.diverged...)
}

// AppendReplayRandom appends the Retrace-Replay-Random header value of
// draws: each draw in standard base64, separated by commas; an empty draw
// is an empty item.
func AppendReplayRandom(b []byte, draws [][]byte) []byte {
	for i, d := range draws {
		if i > 0 {
			b = append(b, ',')
		}
		b = base64.StdEncoding.AppendEncode(b, d)
	}
	return b
}

// ParseReplayRandom decodes a Retrace-Replay-Random header value. An error
// names the item that is not base64.
func ParseReplayRandom(v string) ([][]byte, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, nil
	}
	items := strings.Split(v, ",")
	out := make([][]byte, len(items))
	for i, it := range items {
		d, err := base64.StdEncoding.DecodeString(strings.TrimSpace(it))
		if err != nil {
			return nil, fmt.Errorf("Retrace-Replay-Random: draw %d is not base64: %w", i+1, err)
		}
		out[i] = d
	}
	return out, nil
}

// String formats s as a Retrace-Replay-Seed value: the seed in decimal,
// then the recorded draws of math/rand and math/rand/v2 when known, each
// after a slash ("81985529216486895/3/1").
func (s ReplaySeed) String() string {
	if s.Draws == nil {
		return strconv.FormatUint(s.Seed, 10)
	}
	return fmt.Sprintf("%d/%d/%d", s.Seed, s.Draws[0], s.Draws[1])
}

// ParseReplaySeed parses a Retrace-Replay-Seed value (ReplaySeed.String).
func ParseReplaySeed(v string) (ReplaySeed, error) {
	parts := strings.Split(strings.TrimSpace(v), "/")
	if len(parts) != 1 && len(parts) != 3 {
		return ReplaySeed{}, fmt.Errorf("Retrace-Replay-Seed %q: want SEED or SEED/N/N2", v)
	}
	var nums [3]uint64
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return ReplaySeed{}, fmt.Errorf("Retrace-Replay-Seed %q: %q is not a decimal number", v, p)
		}
		nums[i] = n
	}
	s := ReplaySeed{Seed: nums[0]}
	if len(parts) == 3 {
		s.Draws = &[2]uint64{nums[1], nums[2]}
	}
	return s, nil
}

// RandomDst is the destination a replaying agent names, in the preamble
// of a connection of its own to the mock server, to report where a
// request's randomness diverged (DESIGN.md 3.3): each frame on it carries
// the trace id and one Divergence as a JSON line; the mock server answers
// each frame with one newline once it has noted it.
const RandomDst = "retrace:random"

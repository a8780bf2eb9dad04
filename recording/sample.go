package recording

import (
	"fmt"
	"math/rand/v2"
	"strconv"
)

// Sampler decides, once per inbound request, whether it is recorded. Sample
// costs a few nanoseconds and never allocates, so unsampled requests cost
// almost nothing. The zero value samples nothing.
type Sampler struct {
	threshold uint64 // sample when a random uint64 is below it
	all       bool
}

// NewSampler returns a sampler that records the fraction rate (0..1) of
// requests.
func NewSampler(rate float64) (Sampler, error) {
	if !(rate >= 0 && rate <= 1) { // also rejects NaN
		return Sampler{}, fmt.Errorf("recording: sample rate %v is not between 0 and 1", rate)
	}
	if rate == 1 {
		return Sampler{all: true}, nil
	}
	return Sampler{threshold: uint64(rate * (1 << 63) * 2)}, nil
}

// ParseSampler parses a RETRACE_SAMPLE value such as "1", "0.01" or "5%".
func ParseSampler(v string) (Sampler, error) {
	s := v
	scale := 1.0
	if n := len(s); n > 0 && s[n-1] == '%' {
		s, scale = s[:n-1], 100
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return Sampler{}, fmt.Errorf("recording: sample rate %q is not a number", v)
	}
	smp, err := NewSampler(f / scale)
	if err != nil {
		return Sampler{}, fmt.Errorf("recording: sample rate %q is not between 0 and 1 (or 0%% and 100%%)", v)
	}
	return smp, nil
}

// Sample reports whether this request is recorded.
func (s Sampler) Sample() bool {
	if s.all {
		return true
	}
	return s.threshold != 0 && rand.Uint64() < s.threshold
}

package load

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Mode is a pacing strategy.
type Mode string

// Pacing strategies.
const (
	// ModeOriginal sends each request at its recorded time relative to the
	// first request of the input, scaled by Speed (2 = twice as fast).
	ModeOriginal Mode = "original"
	// ModeRate sends at a fixed Rate per second, or along a linear Ramp.
	ModeRate Mode = "rate"
	// ModeMax sends as fast as the target answers, with Concurrency
	// requests in flight.
	ModeMax Mode = "max"
)

// ParseMode parses a --mode value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeOriginal, ModeRate, ModeMax:
		return m, nil
	}
	return "", fmt.Errorf("unknown mode %q (want original, rate or max)", s)
}

// Ramp is a linear change of the request rate from From to To per second
// over the run's duration.
type Ramp struct{ From, To float64 }

// ParseRamp parses "A:B" (requests per second at the start and at the end).
func ParseRamp(s string) (Ramp, error) {
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return Ramp{}, fmt.Errorf("bad ramp %q (want FROM:TO, e.g. 10:100)", s)
	}
	from, err1 := strconv.ParseFloat(a, 64)
	to, err2 := strconv.ParseFloat(b, 64)
	if err1 != nil || err2 != nil || from < 0 || to < 0 || math.IsInf(from, 0) || math.IsInf(to, 0) || from+to == 0 {
		return Ramp{}, fmt.Errorf("bad ramp %q (want two rates >= 0, not both 0, e.g. 10:100)", s)
	}
	return Ramp{From: from, To: to}, nil
}

// String formats r as ParseRamp reads it.
func (r Ramp) String() string {
	return strconv.FormatFloat(r.From, 'g', -1, 64) + ":" + strconv.FormatFloat(r.To, 'g', -1, 64)
}

// Schedule gives the intended send time of a request as an offset from the
// start of the run. index is the request's 0-based position in the whole
// input (not in the shard), recorded its recorded time, and first the
// recorded time of the input's first request. ok is false when the request
// falls after the end of the run.
//
// Because every shard computes the same schedule from the same input, the
// union of N shards sends every request when a single run would.
type Schedule interface {
	At(index int64, recorded, first time.Time) (offset time.Duration, ok bool)
}

// ScheduleFunc adapts a function to Schedule.
type ScheduleFunc func(index int64, recorded, first time.Time) (time.Duration, bool)

// At calls f.
func (f ScheduleFunc) At(index int64, recorded, first time.Time) (time.Duration, bool) {
	return f(index, recorded, first)
}

// OriginalSchedule replays recorded gaps divided by speed (speed <= 0 is 1).
// Requests recorded before the first one (an input not sorted by time) are
// sent at once. Requests whose offset exceeds limit (when > 0) are dropped.
func OriginalSchedule(speed float64, limit time.Duration) Schedule {
	if speed <= 0 {
		speed = 1
	}
	return ScheduleFunc(func(_ int64, recorded, first time.Time) (time.Duration, bool) {
		d := time.Duration(float64(recorded.Sub(first)) / speed)
		if d < 0 {
			d = 0
		}
		return d, limit <= 0 || d < limit
	})
}

// RateSchedule sends request k at k/rate seconds: a constant rate.
func RateSchedule(rate float64, limit time.Duration) Schedule {
	return RampSchedule(Ramp{From: rate, To: rate}, limit)
}

// RampSchedule changes the rate linearly from r.From to r.To over limit
// (which must be > 0 unless From == To). Request k is sent at the time t at
// which the integral of the rate reaches k:
//
//	From·t + (To−From)·t²/(2·limit) = k
func RampSchedule(r Ramp, limit time.Duration) Schedule {
	a, b := r.From, r.To
	d := limit.Seconds()
	if d <= 0 || a == b {
		return ScheduleFunc(func(k int64, _, _ time.Time) (time.Duration, bool) {
			if a <= 0 {
				return 0, false
			}
			off := time.Duration(float64(k) / a * float64(time.Second))
			return off, limit <= 0 || off < limit
		})
	}
	c := (b - a) / (2 * d) // t² coefficient
	return ScheduleFunc(func(k int64, _, _ time.Time) (time.Duration, bool) {
		if k == 0 {
			return 0, true
		}
		kf := float64(k)
		// c·t² + a·t − k = 0; the stable form of the positive root.
		t := 2 * kf / (a + math.Sqrt(a*a+4*c*kf))
		if math.IsNaN(t) || t >= d {
			return 0, false
		}
		return time.Duration(t * float64(time.Second)), true
	})
}

package hook

import (
	"reflect"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/retrace-dev/retrace/trace"
)

// The real clock while time.Now is patched. time.Now cannot be called (it
// is the patched function), so realNow builds the same Time from the same
// runtime clock reads: time.now (wall and monotonic readings), reachable
// by linkname as the runtime intends (it is in the list of symbols kept for
// widely used packages), and runtime.nanotime.

//go:linkname timeNow time.now
func timeNow() (sec int64, nsec int32, mono int64)

//go:linkname nanotime runtime.nanotime
func nanotime() int64

// timeLayout mirrors time.Time.
type timeLayout struct {
	wall uint64
	ext  int64
	loc  *time.Location
}

const (
	hasMonotonic   = 1 << 63
	nsecShift      = 30
	secondsPerDay  = 86400
	unixToInternal = (1969*365 + 1969/4 - 1969/100 + 1969/400) * secondsPerDay
	wallToInternal = (1884*365 + 1884/4 - 1884/100 + 1884/400) * secondsPerDay
)

// startNano is time's startNano (monotonic readings in a Time are offsets
// from it). It is not reachable, so it is bracketed from the outside: a
// Time from the unpatched time.Now taken between two nanotime reads puts
// startNano within that interval; the tightest of many samples is used.
// The error (a few tens of nanoseconds at most) shifts monotonic readings
// of Times made while the clock is patched by that constant, nothing else.
var startNano = sync.OnceValue(func() int64 {
	lo, hi := int64(-1<<63), int64(1<<63-1)
	for range 200 {
		a := nanotime()
		t := time.Now()
		b := nanotime()
		tl := (*timeLayout)(unsafe.Pointer(&t))
		if tl.wall&hasMonotonic == 0 {
			continue
		}
		lo, hi = max(lo, a-tl.ext), min(hi, b-tl.ext)
	}
	return lo + (hi-lo)/2
})

// realNow is time.Now as the unpatched function computes it.
func realNow() time.Time {
	sec, nsec, mono := timeNow()
	var t time.Time
	tl := (*timeLayout)(unsafe.Pointer(&t))
	tl.loc = time.Local
	if mono == 0 {
		tl.wall, tl.ext = uint64(nsec), sec+unixToInternal
		return t
	}
	mono -= startNano()
	sec += unixToInternal - wallToInternal
	if uint64(sec)>>33 != 0 {
		tl.wall, tl.ext = uint64(nsec), sec+wallToInternal
		return t
	}
	tl.wall, tl.ext = hasMonotonic|uint64(sec)<<nsecShift|uint64(nsec), mono
	return t
}

// nowDouble replaces time.Now: the recorded time plus the time elapsed
// since arrival on the goroutines of a request replayed with
// Retrace-Replay-Time, the real clock everywhere else.
func nowDouble() time.Time {
	if replayClocks.Load() == 0 {
		return realNow() // no request replays a recorded time: skip the trace lookup
	}
	if e := active.Load(); e != nil && e.clock {
		if t := trace.Current(); t != nil && !t.ReplayTime.IsZero() {
			return t.ReplayTime.Add(realNow().Sub(t.Arrived))
		}
	}
	return realNow()
}

func clockTarget() (target, error) {
	startNano() // fixed before time.Now is patched
	v := reflect.ValueOf(time.Now)
	word := new(uintptr)
	*word = v.Pointer()
	return target{name: "time.Now", word: unsafe.Pointer(word), typ: v.Type(), double: nowDouble}, nil
}

// replayClocks counts the live bindings of requests that carry
// Retrace-Replay-Time; while it is zero the patched time.Now does not look
// up the calling goroutine's trace. (A goroutine that inherited such a
// trace keeps the mocked clock until the binding is released: that is when
// the count drops.)
var replayClocks atomic.Int64

// withReplayClock counts a binding with a replay time until release.
func withReplayClock(release func()) func() {
	replayClocks.Add(1)
	var once sync.Once
	return func() {
		once.Do(func() {
			replayClocks.Add(-1)
			release()
		})
	}
}

package trace

import (
	"bytes"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/retrace-dev/retrace/goid"
)

// Trace is one request's identity while it is served.
type Trace struct {
	// ID is the trace id: from Retrace-Trace-Id in replay mode, NewID in
	// record mode. Bind expects a ValidID.
	ID string
	// ReplayTime is zero unless the request carried Retrace-Replay-Time: the
	// recorded start of the request, for time mocking.
	ReplayTime time.Time
	// Arrived is when the agent saw the request (with a monotonic clock
	// reading), so a mocked clock can add the time elapsed since.
	Arrived time.Time
	// Random is the request's randomness (RETRACE_RANDOM), nil when the
	// agent leaves it alone: set by the agent before Bind.
	Random *Random
}

// binding is one Bind: a trace attached to one goroutine and, through a
// pprof label, to the goroutines it starts.
type binding struct {
	// name holds the label value (the trace id). It must stay the first
	// field: the label's value string points at it, and bindingOfName turns
	// that pointer back into the binding. The string keeps the binding
	// alive for as long as any goroutine still carries the label.
	name [MaxIDLen]byte

	trace atomic.Pointer[Trace] // nil once released
	// own is the label set Bind gives a goroutine that had no labels (the
	// common case), in the binding itself and in the cache line of trace:
	// Current on a goroutine with the label reads that one line, where a
	// set and its list allocated apart took two more.
	own struct {
		set  labelSet
		list [1]label
	}

	released atomic.Bool
	goid     int64    // goroutine Bind ran on
	prev     *binding // goTable entry this binding shadowed (nested Bind), or nil

	// Labels of the goroutine before Bind, and the last ones we set on it
	// (Bind, or Current restoring our label). Only the bound goroutine
	// touches them: Current when it finds b in the table, release when
	// called there.
	prevLabels, ourLabels unsafe.Pointer

	// to 192 bytes, a size class whose objects start on a cache line, so
	// that trace and own share one
	_ [24]byte
}

// bindingOfName returns the binding whose name field holds the bytes of v.
// v must be the value of a label recognised by isOurKey: only Bind creates
// those, and their value always points at binding.name.
func bindingOfName(v string) *binding {
	return (*binding)(unsafe.Pointer(unsafe.StringData(v)))
}

var (
	bindings   goTable      // goroutine id → binding made on that goroutine
	live       atomic.Int64 // bindings not yet released
	liveRandom atomic.Int64 // of those, bindings of traces with a Random
)

// Bind binds t to the calling goroutine, and sets a pprof label so that
// every goroutine it starts from now on (and their children) sees t too.
// The application's own pprof labels stay as they are. A trace bound on a
// goroutine shadows the one it inherited or bound before, until released.
//
// release undoes both: it drops the binding from the goroutine table and,
// when called on the bound goroutine, restores the labels the goroutine had
// before Bind (minus labels of traces released meanwhile). Called on another
// goroutine it leaves that goroutine's labels alone; the stale label then
// names a released trace, which Current treats as no trace. release is safe
// to call more than once and from any goroutine. A binding that is never
// released stays in the table: every Bind needs its release.
//
// The label's value is the trace id (its first MaxIDLen bytes), so
// goroutine and CPU profiles show which request a goroutine works for.
//
// Bind(nil) binds nothing and returns a release that does nothing.
func Bind(t *Trace) (release func()) {
	if t == nil {
		return func() {}
	}
	b := &binding{goid: goid.Get()}
	if copy(b.name[:], t.ID) == 0 || strings.IndexByte(t.ID, 0) == 0 {
		b.name[0] = '-' // the label value must not be empty
	}
	b.trace.Store(t)
	b.prev = bindings.swap(b.goid, b)
	b.prevLabels = runtime_getProfLabel()
	if b.prevLabels == nil {
		b.own.list[0] = label{labelKey, b.labelValue()}
		b.own.set.list = b.own.list[:]
		b.ourLabels = unsafe.Pointer(&b.own.set)
	} else {
		b.ourLabels = withLabel(b.prevLabels, b.labelValue())
	}
	runtime_setProfLabel(b.ourLabels)
	live.Add(1)
	if t.Random != nil {
		liveRandom.Add(1)
	}
	return b.release
}

func (b *binding) release() {
	if !b.released.CompareAndSwap(false, true) {
		return
	}
	if t := b.trace.Swap(nil); t != nil && t.Random != nil {
		liveRandom.Add(-1)
	}
	live.Add(-1)

	// Hand the goroutine's table entry back to the innermost binding this
	// one shadowed that is still live. If the entry is no longer b, a later
	// Bind on the goroutine shadows b and skips it when released itself.
	p := b.prev
	for p != nil && p.released.Load() {
		p = p.prev
	}
	bindings.replaceIf(b.goid, b, p)

	if goid.Get() != b.goid {
		return
	}
	cur := runtime_getProfLabel()
	if cur == b.ourLabels {
		runtime_setProfLabel(withoutLabel(b.prevLabels, isReleased))
	} else if next := withoutLabel(cur, func(x *binding) bool { return x == b }); next != cur {
		// The application replaced the labels meanwhile but kept ours
		// (copied by value): take ours out, keep theirs.
		runtime_setProfLabel(next)
	}
	b.prevLabels, b.ourLabels = nil, nil
}

// relabel puts b's label back on its goroutine when the application
// replaced the goroutine's labels after Bind (pprof.Do and
// pprof.SetGoroutineLabels set the labels of a context, which never holds
// ours), so that goroutines started from then on inherit the trace again.
// It runs on the bound goroutine only, and allocates only when the label
// was lost.
func (b *binding) relabel(cur unsafe.Pointer) {
	if labelBinding(cur) != b {
		cur = withLabel(cur, b.labelValue())
		runtime_setProfLabel(cur)
	}
	b.ourLabels = cur
}

// labelValue is the value of b's label: the trace id, in b.name.
func (b *binding) labelValue() string {
	n := bytes.IndexByte(b.name[:], 0)
	if n < 0 {
		n = len(b.name)
	}
	return unsafe.String(&b.name[0], n)
}

func isReleased(b *binding) bool { return b.released.Load() }

// Current returns the trace of the calling goroutine, or nil: the trace
// named by the goroutine's pprof label (set by Bind on this goroutine, or
// inherited from the goroutine that started this one), else the binding
// of this goroutine in the goroutine table. A goroutine that outlives the
// request that started it inherited a label naming a released trace:
// Current returns nil there, so late work is never charged to a request
// that has ended (or to the next one on the same connection).
//
// The label comes first because it is the goroutine's own: reading it
// touches nothing other goroutines write, where the table changes with
// every Bind and release of every request. Both name the same binding
// whenever the label is there: only Bind and Current set the label, and an
// application's label sets (pprof.Do, pprof.SetGoroutineLabels) never hold
// it, since they come from contexts. When the application has replaced the
// labels of a bound goroutine since Bind, Current finds its binding in the
// table and puts the trace's label back, so goroutines it starts afterwards
// inherit the trace again; that is the only time it allocates. It never
// takes a lock.
func Current() *Trace {
	cur := runtime_getProfLabel()
	if cur != nil {
		if b := labelBinding(cur); b != nil {
			if t := b.trace.Load(); t != nil {
				return t
			}
		}
	}
	if live.Load() == 0 {
		// No binding is live, so every one the table could hold is
		// released: most lookups of a service recording a sample of its
		// requests end here. (Read after the label: every Bind and release
		// writes it, from any core.)
		return nil
	}
	if b := bindings.get(goid.Get()); b != nil {
		if t := b.trace.Load(); t != nil {
			if cur != b.ourLabels {
				b.relabel(cur)
			}
			return t
		}
	}
	return nil
}

// Detached is the pprof labels Detach took the trace out of, for Restore
// (nil when it changed nothing: labels with a trace are never nil).
type Detached struct {
	prev unsafe.Pointer
}

// Detach takes the trace label out of the calling goroutine's pprof labels,
// so that the goroutines it starts until Restore inherit no trace; the
// application's own labels stay. Current on a goroutine bound by Bind still
// returns its trace (and puts the label back). It allocates only when the
// goroutine has a trace label.
//
// It is for work that starts goroutines which outlive the request on
// behalf of a shared resource: net/http starts a new connection's readLoop
// and writeLoop from the round trip that dialled it, and they go on to
// serve other requests.
func Detach() Detached {
	cur := runtime_getProfLabel()
	next := withoutLabel(cur, anyBinding)
	if next == cur {
		return Detached{}
	}
	runtime_setProfLabel(next)
	return Detached{prev: cur}
}

// Restore puts back the labels Detach changed.
func (d Detached) Restore() {
	if d.prev != nil {
		runtime_setProfLabel(d.prev)
	}
}

func anyBinding(*binding) bool { return true }

// CurrentID returns the id of Current(), or "" when there is none.
func CurrentID() string {
	if t := Current(); t != nil {
		return t.ID
	}
	return ""
}

// Bound returns the number of live bindings: made by Bind, not yet
// released. It is a gauge for counters and leak checks.
func Bound() int { return int(live.Load()) }

// RandomBound returns the number of live bindings of traces that carry a
// Random: while it is zero no goroutine can find one, and the agent's
// random doubles skip the trace lookup.
func RandomBound() int { return int(liveRandom.Load()) }

package capture

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
)

// Background recordings (DESIGN.md section 10): calls made on no traced
// request's behalf — pool warm-up, start-up pings, driver and ORM
// initialisation queries, health checks, background jobs — are collected
// into sessions marked Background, so that the mock server can answer a
// replayed service's untraced requests and the service boots in replay mode
// with no downstream running.
//
// With sampling below 1, requests that were not sampled are untraced too,
// and their calls are indistinguishable from background traffic; the
// budget below bounds what either costs: a process keeps at most
// bgMaxCalls distinct background calls, and once that is spent an
// untraced call costs one atomic load.
const (
	bgMaxCalls = 2048            // distinct background calls recorded per process
	bgInFlight = 256             // background calls held at once, waiting for their answers
	bgBatch    = 64              // calls per background session
	bgAge      = 2 * time.Second // a batch is written at most this long after its first call
)

// background collects untraced calls into background sessions.
type background struct {
	full atomic.Bool // the budget is spent: nothing more is kept
	// n and first mirror len(calls) and start for due, which every
	// finished request asks without taking mu
	n     atomic.Int32
	first atomic.Int64

	mu    sync.Mutex
	calls []*call
	at    time.Time // wall clock of the batch's first call
	start int64     // its Recorder clock reading
	kept  int       // distinct calls recorded so far
	seen  map[uint64]bool
	seed  maphash.Seed
}

// add keeps c, a new untraced call of oc, for the next background
// session, with oc's set-up calls the first time; false when the budget
// is spent. Called with oc.mu held.
func (bg *background) add(oc *outConn, c *call) bool {
	if bg.full.Load() {
		return false
	}
	bg.mu.Lock()
	defer bg.mu.Unlock()
	if bg.kept+len(bg.calls) >= bgMaxCalls || len(bg.calls) >= bgInFlight {
		if bg.kept >= bgMaxCalls {
			bg.full.Store(true)
		}
		return false
	}
	if len(bg.calls) == 0 {
		bg.at, bg.start = time.Now(), c.start
		bg.first.Store(c.start)
	}
	if !oc.bgSetup && !oc.owned && len(oc.pending) > 0 {
		oc.bgSetup = true
		bg.calls = append(bg.calls, oc.pending...)
	}
	bg.calls = append(bg.calls, c)
	bg.n.Store(int32(len(bg.calls)))
	return true
}

// due reports whether a background batch waits to be written.
func (bg *background) due(now int64) bool {
	n := bg.n.Load()
	return n >= bgBatch || n > 0 && now-bg.first.Load() >= int64(bgAge)
}

// take returns the calls of the batch that are answered (or too old to
// wait for), leaving the others for the next batch; all of them when
// final. Lock order: a connection's lock before bg.mu (add is called with
// the first held), so the calls are looked at with bg.mu released.
func (bg *background) take(now int64, final bool) (calls []*call, at time.Time, start int64) {
	bg.mu.Lock()
	all := bg.calls
	at, start = bg.at, bg.start
	bg.calls = nil
	bg.n.Store(0)
	bg.mu.Unlock()
	var left []*call
	for _, c := range all {
		c.oc.mu.Lock()
		ready := final || c.resp.n > 0 || now-c.end >= int64(bgAge)
		c.oc.mu.Unlock()
		if ready {
			calls = append(calls, c)
		} else {
			left = append(left, c)
		}
	}
	if len(left) > 0 {
		bg.mu.Lock()
		bg.calls = append(left, bg.calls...)
		bg.at, bg.start = at.Add(time.Duration(left[0].start-start)), left[0].start
		bg.first.Store(bg.start)
		bg.n.Store(int32(len(bg.calls)))
		bg.mu.Unlock()
	}
	return calls, at, start
}

// fresh drops the calls already recorded (the same destination and
// request bytes: pings and health checks repeat) and counts the others
// against the budget.
func (bg *background) fresh(calls []recording.Call) []recording.Call {
	bg.mu.Lock()
	defer bg.mu.Unlock()
	if bg.seen == nil {
		bg.seen, bg.seed = map[uint64]bool{}, maphash.MakeSeed()
	}
	out := calls[:0]
	for _, c := range calls {
		var h maphash.Hash
		h.SetSeed(bg.seed)
		h.WriteString(c.Dst)
		h.WriteByte(0)
		h.Write(c.Request)
		if c.Setup {
			h.WriteByte(1)
		}
		k := h.Sum64()
		if bg.seen[k] {
			continue
		}
		bg.seen[k] = true
		if !c.Setup {
			bg.kept++
		}
		out = append(out, c)
	}
	if bg.kept >= bgMaxCalls {
		bg.full.Store(true)
	}
	return out
}

// flushBackground submits the background calls that are ready at now as
// one session (final: all of them, at close).
func (r *Recorder) flushBackground(now int64, final bool) {
	calls, at, start := r.bg.take(now, final)
	if len(calls) == 0 {
		return
	}
	rc := r.bg.fresh(snapshotCalls(calls, start))
	if len(rc) == 0 {
		return
	}
	for i := range rc {
		rc[i].Seq = i
	}
	r.pipe.Submit(&recording.Session{
		V: recording.SchemaVersion, ID: "bg-" + trace.NewID(), App: r.app, At: at, Background: true,
		Inbound: recording.Inbound{Proto: recording.ProtoBackground}, Calls: rc,
	})
}

package mockserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrace-dev/retrace/recording"
	rtrace "github.com/retrace-dev/retrace/trace"
)

// traceTable holds the state of every trace seen, and the aliases the
// replayer registered. Both are bounded: state and aliases expire TTL after
// their last use, state beyond maxTraces drops the least recently used, and
// aliases beyond maxAliases are refused.
type traceTable struct {
	mu      sync.RWMutex
	aliases map[string]alias
	traces  map[string]*traceState
	// gen changes whenever a trace's state is dropped (alias, forget,
	// expiry), so that a connection's cached state of its last trace can
	// be checked without the lock.
	gen atomic.Uint64
	// tick is the table's coarse clock (the server's, in nanoseconds),
	// advanced by the janitor: a request touches its trace with one load
	// and, at most once per tick, one store — no clock reading.
	tick atomic.Int64

	ttl        time.Duration // <= 0: no expiry
	maxTraces  int           // < 0: no bound
	maxAliases int           // < 0: no bound
	onDrop     func(reason string, n int)

	missMu  sync.Mutex
	missing []MissingMock
	missMax int
}

// alias is a registered trace id's recording, with when it was registered
// (on the table's clock).
type alias struct {
	rec string
	at  int64
}

// errAliasesFull refuses an alias beyond the bound.
var errAliasesFull = errors.New("too many aliases")

// traceState is what one trace has consumed and observed. mu covers all of
// it: matching reads and marks used units and appends the observation in one
// step, so concurrent requests of a trace never take the same recorded call.
type traceState struct {
	// touched is the table's tick when a request or a report last used
	// the trace (for expiry); atomic, outside mu.
	touched atomic.Int64
	// transient marks the state of a trace id that names no recording
	// and no alias: never stored in the table, observing nothing, so an
	// unknown id costs a counter and a missing mock, not memory.
	transient bool

	mu      sync.Mutex
	id      string
	recID   string
	entry   *sessionEntry // nil when the trace resolves to no recording
	used    map[string][]bool
	cursor  map[string]map[string]int
	calls   callLog
	dropped int
	reqBuf  []byte              // chunk the observed requests' bytes are copied into
	random  []rtrace.Divergence // reported by the agent (trace.RandomDst)

	// Causal order (see conn.awaitSent): seen marks the recorded calls a
	// live request matched, or that a wait gave up on; every entry of
	// entry.sent before frontier is seen; wake, when not nil, is closed
	// and cleared whenever seen changes.
	seen     []bool
	frontier int
	wake     chan struct{}
}

// markSent notes that recorded call i was sent (matched, or given up on);
// the caller holds ts.mu.
func (ts *traceState) markSent(i int) {
	if ts.seen == nil {
		ts.seen = make([]bool, len(ts.entry.s.Calls))
	}
	if ts.seen[i] {
		return
	}
	ts.seen[i] = true
	for ts.frontier < len(ts.entry.sent) && ts.seen[ts.entry.sent[ts.frontier].call] {
		ts.frontier++
	}
	if ts.wake != nil {
		close(ts.wake)
		ts.wake = nil
	}
}

// unsent returns the calls among the first need entries of entry.sent that
// no live request matched yet, leaving out those recorded on connection
// conn (a client writes on one connection in turn, so what it sent there
// after the held answer's request is behind it in the same stream); the
// caller holds ts.mu.
func (ts *traceState) unsent(need int, conn int64) []int {
	if ts.frontier >= need {
		return nil
	}
	var out []int
	for _, e := range ts.entry.sent[ts.frontier:need] {
		if (ts.seen == nil || !ts.seen[e.call]) && (conn == 0 || ts.entry.s.Calls[e.call].Conn != conn) {
			out = append(out, e.call)
		}
	}
	return out
}

func newTraceTable(cfg *Config, onDrop func(reason string, n int)) *traceTable {
	return &traceTable{aliases: map[string]alias{}, traces: map[string]*traceState{}, missMax: cfg.MaxMissing,
		ttl: cfg.TraceTTL, maxTraces: cfg.MaxTraces, maxAliases: cfg.MaxAliases, onDrop: onDrop}
}

// touch marks ts used at the table's current tick.
func (tt *traceTable) touch(ts *traceState) {
	if now := tt.tick.Load(); ts.touched.Load() != now {
		ts.touched.Store(now)
	}
}

// trace returns the state of trace tid, creating it (and resolving its
// recording) on first use. A trace id that names neither an alias nor a
// recording gets a transient state, kept nowhere.
func (s *Server) trace(ctx context.Context, tid string) *traceState {
	tt := s.traces
	for {
		tt.mu.RLock()
		ts := tt.traces[tid]
		a, aliased := tt.aliases[tid]
		tt.mu.RUnlock()
		if ts != nil {
			tt.touch(ts)
			return ts
		}
		recID := tid
		if aliased {
			recID = a.rec
		}
		e := s.idx.session(recID)
		if e == nil && s.cfg.Lookup != nil {
			sess, err := s.cfg.Lookup(ctx, recID)
			if err != nil {
				s.log.Warn("looking up recording", "recording", recID, "trace", tid, "err", err)
			} else if sess != nil {
				s.idx.add(sess)
				e = s.idx.session(recID)
			}
		}
		ts = &traceState{id: tid, recID: recID, entry: e, used: map[string][]bool{}, cursor: map[string]map[string]int{}}
		if e == nil && !aliased {
			s.metrics.unknownTraces.Inc()
			ts.transient = true
			return ts
		}
		ts.touched.Store(tt.tick.Load())
		tt.mu.Lock()
		if cur := tt.traces[tid]; cur != nil {
			tt.mu.Unlock()
			return cur
		}
		if b, ok := tt.aliases[tid]; ok != aliased || b != a {
			// The alias was deleted or replaced while the recording was
			// resolved (a late request of a trace whose replay is over,
			// racing its DELETE): resolve again, or the state would
			// outlive its trace.
			tt.mu.Unlock()
			continue
		}
		tt.evictLocked()
		tt.traces[tid] = ts
		tt.mu.Unlock()
		return ts
	}
}

// evictLocked makes room for one more trace when the table is full,
// dropping the least recently used sixteenth in one pass (a scan per
// insert would cost O(n) each); the caller holds tt.mu for writing.
func (tt *traceTable) evictLocked() {
	if tt.maxTraces < 0 || len(tt.traces) < tt.maxTraces {
		return
	}
	type aged struct {
		id string
		at int64
	}
	all := make([]aged, 0, len(tt.traces))
	for id, ts := range tt.traces {
		all = append(all, aged{id, ts.touched.Load()})
	}
	slices.SortFunc(all, func(a, b aged) int { return cmp.Compare(a.at, b.at) })
	n := max(1, tt.maxTraces/16, len(tt.traces)-tt.maxTraces+1)
	for _, a := range all[:min(n, len(all))] {
		delete(tt.traces, a.id)
	}
	tt.gen.Add(1)
	tt.onDrop("lru", min(n, len(all)))
}

// expire advances the table's clock to now and drops the state and the
// aliases nothing used for TTL. An alias lives as long as its trace's
// state, or TTL after its registration when the trace has none.
func (tt *traceTable) expire(now int64) {
	tt.tick.Store(now)
	if tt.ttl <= 0 {
		return
	}
	cutoff := now - int64(tt.ttl)
	tt.mu.Lock()
	defer tt.mu.Unlock()
	traces, aliases := 0, 0
	for id, ts := range tt.traces {
		if ts.touched.Load() < cutoff {
			delete(tt.traces, id)
			traces++
		}
	}
	for id, a := range tt.aliases {
		if _, live := tt.traces[id]; !live && a.at < cutoff {
			delete(tt.aliases, id)
			aliases++
		}
	}
	if traces > 0 {
		tt.gen.Add(1)
		tt.onDrop("ttl", traces)
	}
	if aliases > 0 {
		tt.onDrop("alias_ttl", aliases)
	}
}

// setAlias makes trace another name of recording rec and forgets what was
// observed under that trace before. It refuses a new alias beyond the
// bound.
func (tt *traceTable) setAlias(trace, rec string) error {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if _, ok := tt.aliases[trace]; !ok && tt.maxAliases >= 0 && len(tt.aliases) >= tt.maxAliases {
		return fmt.Errorf("%w: %d registered (the bound; DELETE /traces/{trace} what is replayed, or wait for them to expire)", errAliasesFull, len(tt.aliases))
	}
	tt.aliases[trace] = alias{rec: rec, at: tt.tick.Load()}
	delete(tt.traces, trace)
	tt.gen.Add(1)
	return nil
}

func (tt *traceTable) forget(trace string) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	delete(tt.aliases, trace)
	delete(tt.traces, trace)
	tt.gen.Add(1)
}

func (tt *traceTable) lookup(trace string) (*traceState, string) {
	tt.mu.RLock()
	defer tt.mu.RUnlock()
	rec := trace
	if a, ok := tt.aliases[trace]; ok {
		rec = a.rec
	}
	ts := tt.traces[trace]
	if ts != nil {
		tt.touch(ts)
	}
	return ts, rec
}

// sizes returns how many traces have state and how many aliases are
// registered.
func (tt *traceTable) sizes() (traces, aliases int) {
	tt.mu.RLock()
	defer tt.mu.RUnlock()
	return len(tt.traces), len(tt.aliases)
}

func (tt *traceTable) addMissing(m MissingMock) {
	tt.missMu.Lock()
	defer tt.missMu.Unlock()
	if len(tt.missing) < tt.missMax {
		tt.missing = append(tt.missing, m)
	}
}

func (tt *traceTable) missingList() []MissingMock {
	tt.missMu.Lock()
	defer tt.missMu.Unlock()
	return append([]MissingMock{}, tt.missing...)
}

// observe appends an observed call; the caller holds ts.mu.
func (ts *traceState) observe(oc ObservedCall, limit int) {
	if ts.transient {
		return // no report is ever read
	}
	if ts.calls.n >= limit {
		ts.dropped++
		return
	}
	oc.Seq = ts.calls.n + ts.dropped
	oc.Request = ts.keep(oc.Request)
	ts.calls.add(oc)
}

// callLog is a trace's observed calls in blocks that grow from 8 calls to
// 512: a long trace's log never copies itself to grow, which would hold up
// the answer that made it grow (by milliseconds at 100,000 calls).
type callLog struct {
	blocks [][]ObservedCall
	n      int
}

func (l *callLog) add(oc ObservedCall) {
	if k := len(l.blocks); k == 0 || len(l.blocks[k-1]) == cap(l.blocks[k-1]) {
		size := 8
		if k > 0 {
			size = min(2*cap(l.blocks[k-1]), 512)
		}
		l.blocks = append(l.blocks, make([]ObservedCall, 0, size))
	}
	last := &l.blocks[len(l.blocks)-1]
	*last = append(*last, oc)
	l.n++
}

// appendTo appends the calls, in order, to dst.
func (l *callLog) appendTo(dst []ObservedCall) []ObservedCall {
	for _, b := range l.blocks {
		dst = append(dst, b...)
	}
	return dst
}

// keep returns a copy of b carved from a chunk shared by the trace's
// observations (one allocation per few kilobytes of requests, not one per
// request); the caller holds ts.mu.
func (ts *traceState) keep(b []byte) []byte {
	const chunk = 4 << 10
	if len(b) > chunk/4 {
		return append([]byte(nil), b...)
	}
	if len(ts.reqBuf)+len(b) > cap(ts.reqBuf) {
		ts.reqBuf = make([]byte, 0, chunk)
	}
	start := len(ts.reqBuf)
	ts.reqBuf = append(ts.reqBuf, b...)
	return ts.reqBuf[start:len(ts.reqBuf):len(ts.reqBuf)]
}

// report builds the TraceReport of ts.
func (s *Server) report(ts *traceState, trace, rec string) TraceReport {
	r := TraceReport{Trace: trace, Calls: []ObservedCall{}, Unused: []recording.Call{}}
	if ts == nil {
		if e := s.idx.session(rec); e != nil {
			r.Recording = rec
			for _, c := range e.s.Calls {
				if !c.Setup {
					r.Unused = append(r.Unused, c)
				}
			}
		}
		return r
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	r.Calls = ts.calls.appendTo(r.Calls)
	r.Dropped = ts.dropped
	r.Random = ts.divergences()
	if ts.entry == nil {
		return r
	}
	r.Recording = ts.recID
	usedCall := map[int]bool{}
	for dst, used := range ts.used {
		du := s.idx.unitsFor(ts.entry, dst)
		for i, u := range used {
			if u {
				usedCall[du.units[i].call] = true
			}
		}
	}
	for i, c := range ts.entry.s.Calls {
		if _, pass := s.cfg.passthrough(c.Dst); pass {
			continue // proxied whole to the real destination, never matched
		}
		if !c.Setup && !usedCall[i] {
			r.Unused = append(r.Unused, c)
		}
	}
	return r
}

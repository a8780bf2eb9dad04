package mockserver

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"

	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/protocols"
)

// How a live destination was found among the recorded ones (DESIGN.md
// section 10): the same name first, then the configured mapping, then the
// recorded destination of the same protocol whose calls fit best.
const (
	HowExact = "exact" // the recordings name the destination as the service dialled it
	HowMap   = "map"   // Config.Map (retrace mock --map NEW=RECORDED)
	HowAuto  = "auto"  // chosen by protocol, the first request and the port
	HowNone  = "none"  // no recorded destination fits: every request is a missing mock
)

// DestDecision says which recorded destination answers a live one, and
// why. GET /destinations lists one per live destination seen.
type DestDecision struct {
	Live     string `json:"live"`               // the destination the service dialled in replay
	Recorded string `json:"recorded,omitempty"` // the recorded destination answering it; "" for none
	How      string `json:"how"`                // HowExact, HowMap, HowAuto or HowNone
	Proto    string `json:"proto,omitempty"`
	// Reason says what decided an automatic choice (or why none was
	// possible).
	Reason string `json:"reason,omitempty"`
	// Tentative marks an automatic choice made without a request to
	// compare (a protocol whose server speaks first, an untraced ping):
	// a later connection's first traced request can still decide
	// otherwise.
	Tentative bool `json:"tentative,omitempty"`
}

// dests resolves live destinations to recorded ones and remembers every
// decision.
type dests struct {
	fixed map[string]string // Config.Map, host:port or host keys
	mu    sync.RWMutex
	seen  map[string]*DestDecision // by live destination
	log   func(d DestDecision)     // once per new decision
}

func newDests(m map[string]string, log func(DestDecision)) *dests {
	return &dests{fixed: m, seen: map[string]*DestDecision{}, log: log}
}

// list returns every decision, by live destination.
func (d *dests) list() []DestDecision {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make([]DestDecision, 0, len(d.seen))
	for _, v := range d.seen {
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b DestDecision) int { return strings.Compare(a.Live, b.Live) })
	return out
}

// decided returns the decision in force for live, if a firm one was made.
func (d *dests) decided(live string) (DestDecision, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	v := d.seen[live]
	if v == nil {
		return DestDecision{}, false
	}
	return *v, true
}

// note records a decision; a firm one replaces a tentative one, never
// the other way round. It returns the decision in force.
func (d *dests) note(n DestDecision) DestDecision {
	d.mu.Lock()
	cur := d.seen[n.Live]
	if cur != nil && (!cur.Tentative || n.Tentative) {
		d.mu.Unlock()
		return *cur
	}
	d.seen[n.Live] = &n
	d.mu.Unlock()
	if d.log != nil {
		d.log(n)
	}
	return n
}

// mapped applies the configured mapping: "host:port" keys first, then a
// host key, which keeps the port.
func (d *dests) mapped(live string) (string, bool) {
	if r, ok := d.fixed[live]; ok {
		return r, true
	}
	host, port, err := net.SplitHostPort(live)
	if err != nil {
		return "", false
	}
	if r, ok := d.fixed[host]; ok {
		if _, _, err := net.SplitHostPort(r); err == nil {
			return r, true
		}
		return net.JoinHostPort(r, port), true
	}
	return "", false
}

// resolveFixed answers what needs no request: the recordings know live
// by its name (exact), the mapping names it, or an earlier firm
// automatic decision did. ok is false when the connection's requests must
// decide.
func (s *Server) resolveFixed(live string) (DestDecision, bool) {
	if r, ok := s.dests.mapped(live); ok {
		return s.dests.note(DestDecision{Live: live, Recorded: r, How: HowMap, Proto: s.protoFor(r)}), true
	}
	if d := s.idx.dst(live); d != nil {
		return s.dests.note(DestDecision{Live: live, Recorded: live, How: HowExact, Proto: d.proto}), true
	}
	if d, ok := s.dests.decided(live); ok && !d.Tentative {
		return d, true
	}
	return DestDecision{}, false
}

// candidate is a recorded destination considered for a live one.
type candidate struct {
	dst   string
	score int // see scoreCandidate
}

// resolveServerFirst chooses, for a live destination no recording names
// whose client has sent nothing, a recorded destination of a protocol
// whose server speaks first (MySQL): the client waits for its greeting.
// tid is the trace of the connection's preamble ("" for none). ok is false
// when the recordings hold no such destination.
func (s *Server) resolveServerFirst(live, tid string) (DestDecision, bool) {
	var cands []candidate
	s.idx.mu.RLock()
	inTrace := s.traceDsts(tid)
	for dst, d := range s.idx.dsts {
		if d.book.Greeting(0) == nil {
			continue
		}
		sc := portScore(live, dst) + nameScore(live, dst)
		if inTrace[dst] {
			sc += 4
		}
		cands = append(cands, candidate{dst, sc})
	}
	s.idx.mu.RUnlock()
	best, n := bestCandidate(cands)
	if best.dst == "" {
		return DestDecision{}, false
	}
	why := fmt.Sprintf("the client spoke not first: of %d recorded destinations whose server speaks first, the best by trace, port and name", n)
	return s.dests.note(DestDecision{Live: live, Recorded: best.dst, How: HowAuto, Proto: s.protoFor(best.dst), Reason: why, Tentative: n > 1}), true
}

// resolveByRequest chooses the recorded destination of protocol proto that
// best fits the first request r of a connection to live, made for trace
// tid ("" for none).
func (s *Server) resolveByRequest(live string, proto wire.Protocol, r *wire.Request, tid string) DestDecision {
	name := proto.Name()
	var cands []candidate
	var entry *sessionEntry
	if tid != "" {
		if ts := s.trace(s.ctx, tid); ts != nil {
			entry = ts.entry
		}
	}
	if entry != nil {
		s.idx.build(entry)
	}
	s.idx.mu.RLock()
	for dst, d := range s.idx.dsts {
		if !sameWire(d.proto, name) {
			continue
		}
		sc := portScore(live, dst) + nameScore(live, dst)
		if entry != nil {
			sc += 4 * unitScore(entry.units[dst], r)
		}
		if _, ok := d.setupOp[r.Op]; ok && r.Op != "" {
			sc += 2
		}
		if d.background != nil {
			sc += 2 * unitScore(d.background, r)
		}
		cands = append(cands, candidate{dst, sc})
	}
	s.idx.mu.RUnlock()
	best, n := bestCandidate(cands)
	if best.dst == "" {
		return s.dests.note(DestDecision{Live: live, How: HowNone, Proto: name,
			Reason: fmt.Sprintf("no recording has a %s destination", name)})
	}
	firm := n == 1 || (entry != nil && best.score >= 8)
	why := fmt.Sprintf("best of %d recorded %s destinations for %s %q (score %d)", n, name, r.Op, clip(r.Key), best.score)
	if entry != nil {
		why += fmt.Sprintf(" in the recording of trace %s", tid)
	}
	return s.dests.note(DestDecision{Live: live, Recorded: best.dst, How: HowAuto, Proto: name, Reason: why, Tentative: !firm})
}

// sameWire reports whether recorded destinations of protocols a and b
// answer each other's connections: the same protocol, or two names of
// one multiplexed connection protocol (gRPC calls and HTTP/2 streams).
func sameWire(a, b string) bool {
	if a == b {
		return true
	}
	pa, ok1 := protocols.All.For(a).(wire.Multiplexed)
	pb, ok2 := protocols.All.For(b).(wire.Multiplexed)
	return ok1 && ok2 && pa.ConnProto() == pb.ConnProto()
}

// traceDsts returns the destinations the recording of trace tid calls;
// the caller holds s.idx.mu for reading.
func (s *Server) traceDsts(tid string) map[string]bool {
	if tid == "" {
		return nil
	}
	s.traces.mu.RLock()
	ts := s.traces.traces[tid]
	a, ok := s.traces.aliases[tid]
	s.traces.mu.RUnlock()
	recID := tid
	if ok {
		recID = a.rec
	}
	var e *sessionEntry
	if ts != nil {
		e = ts.entry
	} else {
		e = s.idx.sessions[recID]
	}
	if e == nil {
		return nil
	}
	out := map[string]bool{}
	for i := range e.s.Calls {
		out[e.s.Calls[i].Dst] = true
	}
	return out
}

// unitScore rates how well a recording's units fit r: 2 when one has the
// same operation and key, 1 for the same operation, 0 otherwise.
func unitScore(du *dstUnits, r *wire.Request) int {
	if du == nil {
		return 0
	}
	best := 0
	for _, i := range du.byOp[r.Op] {
		if du.units[i].req.Key == r.Key {
			return 2
		}
		best = 1
	}
	return best
}

// portScore prefers a recorded destination on the live one's port: a
// service moved to another environment usually keeps its ports.
func portScore(live, rec string) int {
	_, lp, err1 := net.SplitHostPort(live)
	_, rp, err2 := net.SplitHostPort(rec)
	if err1 == nil && err2 == nil && lp == rp {
		return 2
	}
	return 0
}

// nameScore prefers a recorded destination whose host name starts with
// the same label (pricing.staging and pricing.prod.svc).
func nameScore(live, rec string) int {
	lh, _, err1 := net.SplitHostPort(live)
	rh, _, err2 := net.SplitHostPort(rec)
	if err1 != nil || err2 != nil || net.ParseIP(lh) != nil || net.ParseIP(rh) != nil {
		return 0
	}
	l, _, _ := strings.Cut(lh, ".")
	r, _, _ := strings.Cut(rh, ".")
	if l == r {
		return 1
	}
	return 0
}

// bestCandidate returns the best candidate (ties broken by name, so the choice is
// the same on every run) and how many there were.
func bestCandidate(cands []candidate) (candidate, int) {
	var best candidate
	for _, c := range cands {
		if best.dst == "" || c.score > best.score || c.score == best.score && c.dst < best.dst {
			best = c
		}
	}
	return best, len(cands)
}

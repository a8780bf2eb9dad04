package mockserver

import (
	"bytes"
	"cmp"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/protocols"
)

// index holds the loaded recordings. It keeps the decoded sessions as they
// are and refers into their payloads: the per-call features that matching
// needs are computed when a trace first uses a recording, so memory for
// loaded sessions stays proportional to the recorded bytes.
type index struct {
	mu       sync.RWMutex
	sessions map[string]*sessionEntry
	dsts     map[string]*dstInfo
	tls      map[string][]trace.TLSFacts // TLS facts by destination (tlsfacts.go)
}

// sessionEntry is one loaded recording.
type sessionEntry struct {
	s     *recording.Session
	once  sync.Once
	units map[string]*dstUnits // by destination, built on first use
	// sent lists, by recorded start, the calls a replay must have sent
	// before an answer the recording saw after their start is released
	// (causal order): every non set-up call that expects an answer.
	// Built with units.
	sent []sentCall
	// givenUp marks, by index in Session.Calls, the calls a causal hold
	// of a trace of this recording stopped waiting for. Built with units.
	givenUp []atomic.Bool
}

// sentCall is one entry of sessionEntry.sent.
type sentCall struct {
	start int64 // recorded StartNs
	call  int   // index in Session.Calls
}

// dstUnits are the answerable pieces of one recording's calls to one
// destination: a call per unit, except that a recorded Redis pipeline is
// split into one unit per command.
type dstUnits struct {
	units []unit
	byOp  map[string][]int // unit indexes in recorded order, by operation
	flat  sync.Map         // unit index → its body as flattened JSON (nil: not JSON), for the JSON strategy
}

// flatJSON returns unit i's body flattened by flatJSON, computed once.
func (du *dstUnits) flatJSON(i int) (map[string]string, bool) {
	if v, ok := du.flat.Load(i); ok {
		m := v.(map[string]string)
		return m, m != nil
	}
	m, ok := flatJSON(du.units[i].req.Body)
	if !ok {
		m = nil
	}
	du.flat.Store(i, m)
	return m, ok
}

type unit struct {
	req  wire.Request
	resp []byte
	seq  int // Seq of the recorded call
	call int // index in Session.Calls
}

// dstInfo is what any recording says about a destination: its protocol,
// the protocol's book of it, and its set-up traffic, answered on every
// connection.
type dstInfo struct {
	proto   string
	book    wire.Book
	setup   map[string]setupAns // exact request bytes → answer
	setupOp map[string]setupAns // operation → first answer
	// background holds the calls of the application's start-up and
	// background recordings (Session.Background) to the destination:
	// traffic of no request, answered to untraced requests by similarity.
	background *dstUnits
}

type setupAns struct {
	resp []byte
	seq  int
}

func newIndex() *index {
	return &index{sessions: map[string]*sessionEntry{}, dsts: map[string]*dstInfo{}}
}

// add indexes s, replacing a loaded session of the same id.
func (ix *index) add(s *recording.Session) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.sessions[s.ID] = &sessionEntry{s: s}
	for i := range s.Calls {
		c := &s.Calls[i]
		ix.addTLS(c)
		d := ix.dsts[c.Dst]
		if d == nil || d.proto == protoRaw && c.Proto != protoRaw {
			// A protocol the recorder recognised on any connection to dst
			// outranks "raw" (a connection whose start it did not see).
			nd := &dstInfo{proto: c.Proto, book: protocols.All.For(c.Proto).NewBook()}
			if d != nil {
				nd.setup, nd.setupOp, nd.background = d.setup, d.setupOp, d.background
			}
			d = nd
			ix.dsts[c.Dst] = d
		}
		if c.Host != "" && c.Host != c.Dst {
			// A call names its destination as dialled (Host, when the
			// service dialled a name) and as resolved (Dst): a replay whose
			// agent sends a named dial unresolved finds it under the name.
			ix.dsts[c.Host] = d
		}
		if c.Proto != d.proto {
			continue // a raw call to a destination of a known protocol
		}
		wc := wireCall(c)
		d.book.Learn(wc)
		if c.Setup {
			for _, u := range protocols.All.For(c.Proto).NewSession(d.book).Units(wc) {
				d.addSetup(unit{req: u.Req, resp: u.Resp, seq: c.Seq})
			}
		}
	}
	if s.Background {
		ix.addBackground(s)
	}
}

// maxBackgroundUnits bounds what the background recordings keep per
// destination: they repeat themselves (pings, health checks, the same
// initialisation queries on every start).
const maxBackgroundUnits = 10000

// addBackground indexes the calls of a background session by destination;
// the caller holds ix.mu.
func (ix *index) addBackground(s *recording.Session) {
	sessions := map[string]wire.Session{}
	for i := range s.Calls {
		c := &s.Calls[i]
		d := ix.dsts[c.Dst]
		if d == nil || d.proto != c.Proto {
			continue
		}
		ws := sessions[c.Dst]
		if ws == nil {
			ws = protocols.All.For(c.Proto).NewSession(d.book)
			sessions[c.Dst] = ws
		}
		units := ws.Units(wireCall(c))
		if c.Setup {
			continue
		}
		if d.background == nil {
			d.background = &dstUnits{byOp: map[string][]int{}}
		}
		du := d.background
		for _, u := range units {
			if len(du.units) >= maxBackgroundUnits {
				return
			}
			du.byOp[u.Req.Op] = append(du.byOp[u.Req.Op], len(du.units))
			du.units = append(du.units, unit{req: u.Req, resp: u.Resp, seq: c.Seq, call: i})
		}
	}
}

// answerBackground finds the background recordings' answer to an untraced
// request r to dst: the same bytes, else the same operation and key, else
// the latest answer to the same operation (a start-up query recorded with
// other literals).
func (ix *index) answerBackground(dst string, r *wire.Request) (setupAns, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	d := ix.dsts[dst]
	if d == nil || d.background == nil || r.Op == "" && len(r.Raw) == 0 {
		return setupAns{}, false
	}
	du := d.background
	ids := du.byOp[r.Op]
	for _, i := range ids {
		if bytes.Equal(du.units[i].req.Raw, r.Raw) {
			return setupAns{du.units[i].resp, du.units[i].seq}, true
		}
	}
	for _, i := range ids {
		if du.units[i].req.Key == r.Key {
			return setupAns{du.units[i].resp, du.units[i].seq}, true
		}
	}
	if len(ids) > 0 && r.Op != "" {
		u := du.units[ids[len(ids)-1]]
		return setupAns{u.resp, u.seq}, true
	}
	return setupAns{}, false
}

// wireCall is a recorded call as its protocol sees it.
func wireCall(c *recording.Call) wire.Call {
	return wire.Call{Request: c.Request, Response: c.Response, Setup: c.Setup, Conn: c.Conn, Seq: c.Seq}
}

func (d *dstInfo) addSetup(u unit) {
	if u.req.Raw == nil {
		return
	}
	if d.setup == nil {
		d.setup, d.setupOp = map[string]setupAns{}, map[string]setupAns{}
	}
	k := string(u.req.Raw)
	if _, ok := d.setup[k]; !ok {
		d.setup[k] = setupAns{u.resp, u.seq}
	}
	if _, ok := d.setupOp[u.req.Op]; !ok && u.req.Op != "" {
		d.setupOp[u.req.Op] = setupAns{u.resp, u.seq}
	}
}

func (ix *index) session(id string) *sessionEntry {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.sessions[id]
}

func (ix *index) dst(dst string) *dstInfo {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.dsts[dst]
}

func (ix *index) count() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.sessions)
}

// answerSetup finds a recorded answer to a set-up request: the same bytes
// first, then the same operation.
func (ix *index) answerSetup(dst string, r *wire.Request) (setupAns, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	d := ix.dsts[dst]
	if d == nil {
		return setupAns{}, false
	}
	if a, ok := d.setup[string(r.Raw)]; ok {
		return a, true
	}
	if r.Setup {
		if a, ok := d.setupOp[r.Op]; ok {
			return a, true
		}
	}
	return setupAns{}, false
}

// fallback asks the book of dst for an answer to r from any recording
// (a statement prepared again on another connection).
func (ix *index) fallback(dst string, r *wire.Request) ([]byte, int, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if d := ix.dsts[dst]; d != nil {
		return d.book.Fallback(r)
	}
	return nil, 0, false
}

// unitsFor returns the answerable units of e's calls to dst.
func (ix *index) unitsFor(e *sessionEntry, dst string) *dstUnits {
	ix.build(e)
	return e.units[dst]
}

// build computes e's units and causal list, once.
func (ix *index) build(e *sessionEntry) {
	e.once.Do(func() {
		e.units = ix.buildUnits(e.s)
		e.sent = causalCalls(e.s, e.units)
		e.givenUp = make([]atomic.Bool, len(e.s.Calls))
	})
}

// causalCalls lists, by recorded start, the calls of s that other answers
// may wait for: those with a unit that expects an answer. Set-up traffic
// belongs to connections, and commands without an answer (COM_STMT_CLOSE)
// are sent whenever a driver gets round to it, often by another request.
func causalCalls(s *recording.Session, units map[string]*dstUnits) []sentCall {
	want := map[int]bool{}
	for _, du := range units {
		for _, u := range du.units {
			if !u.req.NoReply && !u.req.Setup {
				want[u.call] = true
			}
		}
	}
	out := make([]sentCall, 0, len(want))
	for i := range want {
		out = append(out, sentCall{start: s.Calls[i].StartNs, call: i})
	}
	slices.SortFunc(out, func(a, b sentCall) int { return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.call, b.call)) })
	return out
}

// sentBefore returns how many entries of e.sent started before t.
func (e *sessionEntry) sentBefore(t int64) int {
	n, _ := slices.BinarySearchFunc(e.sent, t, func(c sentCall, t int64) int { return cmp.Compare(c.start, t) })
	return n
}

func (ix *index) buildUnits(s *recording.Session) map[string]*dstUnits {
	out := map[string]*dstUnits{}
	sessions := map[string]wire.Session{} // by destination
	// the books the sessions read are written by recordings loaded later
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	for i := range s.Calls {
		c := &s.Calls[i]
		ws := sessions[c.Dst]
		if ws == nil {
			var book wire.Book = wire.NoBook{}
			proto := protocols.All.For(c.Proto)
			if d := ix.dsts[c.Dst]; d != nil && d.proto == c.Proto {
				book = d.book
			}
			ws = proto.NewSession(book)
			sessions[c.Dst] = ws
		}
		// set-up calls too: they may prepare what later calls use
		units := ws.Units(wireCall(c))
		if c.Setup {
			continue
		}
		du := out[c.Dst]
		if du == nil {
			du = &dstUnits{byOp: map[string][]int{}}
			out[c.Dst] = du
		}
		if c.Host != "" && c.Host != c.Dst && out[c.Host] == nil {
			out[c.Host] = du // the name dialled, as in add
		}
		for _, u := range units {
			du.byOp[u.Req.Op] = append(du.byOp[u.Req.Op], len(du.units))
			du.units = append(du.units, unit{req: u.Req, resp: u.Resp, seq: c.Seq, call: i})
		}
	}
	return out
}

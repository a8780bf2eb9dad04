package mockserver

import (
	"cmp"
	"slices"
	"sync"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/http1"
	"github.com/retrace-dev/retrace/wire/mysql"
	"github.com/retrace-dev/retrace/wire/redis"
)

// index holds the loaded recordings. It keeps the decoded sessions as they
// are and refers into their payloads: the per-call features that matching
// needs are computed when a trace first uses a recording, so memory for
// loaded sessions stays proportional to the recorded bytes.
type index struct {
	mu       sync.RWMutex
	sessions map[string]*sessionEntry
	dsts     map[string]*dstInfo
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
	m, ok := flatJSON(du.units[i].req.body)
	if !ok {
		m = nil
	}
	du.flat.Store(i, m)
	return m, ok
}

type unit struct {
	req  request
	resp []byte
	seq  int // Seq of the recorded call
	call int // index in Session.Calls
}

// dstInfo is what any recording says about a destination: its protocol and
// its set-up traffic, answered on every connection.
type dstInfo struct {
	proto    string
	greeting []byte              // MySQL greeting payload
	setup    map[string]setupAns // exact request bytes → answer
	setupOp  map[string]setupAns // operation → first answer
	prepares map[string]setupAns // MySQL: SQL text → COM_STMT_PREPARE answer
	stmtSQL  map[uint32]string   // MySQL: recorded statement id → SQL, from any recording
	book     wire.Book           // PostgreSQL: what every recording says (see postgres.go)
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
		d := ix.dsts[c.Dst]
		if d == nil {
			d = &dstInfo{proto: c.Proto}
			ix.dsts[c.Dst] = d
		} else if d.proto == protoRaw && c.Proto != protoRaw {
			// A protocol the recorder recognised on any connection to dst
			// outranks "raw" (a connection whose start it did not see).
			d.proto = c.Proto
		}
		if c.Proto == protoMySQL {
			ix.addMySQL(d, c)
		}
		if c.Proto == protoPostgres {
			d.learnPostgres(c)
			continue // its set-up is answered by the protocol itself
		}
		if c.Setup {
			for _, u := range splitCall(c, nil) {
				d.addSetup(u)
			}
		}
	}
}

func (d *dstInfo) addSetup(u unit) {
	if u.req.raw == nil {
		return
	}
	if d.setup == nil {
		d.setup, d.setupOp = map[string]setupAns{}, map[string]setupAns{}
	}
	k := string(u.req.raw)
	if _, ok := d.setup[k]; !ok {
		d.setup[k] = setupAns{u.resp, u.seq}
	}
	if _, ok := d.setupOp[u.req.op]; !ok && u.req.op != "" {
		d.setupOp[u.req.op] = setupAns{u.resp, u.seq}
	}
}

func (ix *index) addMySQL(d *dstInfo, c *recording.Call) {
	if d.greeting == nil && len(c.Request) == 0 {
		if g, ok := mysql.FindGreeting(c.Response); ok {
			d.greeting = g
		}
	}
	p := lastMySQLMessage(c.Request)
	if len(p) < 2 || p[0] != mysql.ComStmtPrepare {
		return
	}
	id, ok := mysql.StmtID(c.Response)
	if !ok {
		return
	}
	if d.prepares == nil {
		d.prepares, d.stmtSQL = map[string]setupAns{}, map[uint32]string{}
	}
	q := string(p[1:])
	if _, seen := d.prepares[q]; !seen {
		d.prepares[q] = setupAns{c.Response, c.Seq}
	}
	if _, seen := d.stmtSQL[id]; !seen {
		d.stmtSQL[id] = q
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
func (ix *index) answerSetup(dst string, r *request) (setupAns, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	d := ix.dsts[dst]
	if d == nil {
		return setupAns{}, false
	}
	if a, ok := d.setup[string(r.raw)]; ok {
		return a, true
	}
	if r.setup {
		if a, ok := d.setupOp[r.op]; ok {
			return a, true
		}
	}
	return setupAns{}, false
}

// prepare finds a recorded COM_STMT_PREPARE answer for q from any recording
// of dst.
func (ix *index) prepare(dst, q string) (setupAns, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if d := ix.dsts[dst]; d != nil {
		a, ok := d.prepares[q]
		return a, ok
	}
	return setupAns{}, false
}

func (ix *index) stmtSQL(dst string, id uint32) (string, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if d := ix.dsts[dst]; d != nil {
		q, ok := d.stmtSQL[id]
		return q, ok
	}
	return "", false
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
			if !u.req.noReply && !u.req.setup {
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
	type connStmt struct {
		conn int64
		id   uint32
	}
	stmts := map[connStmt]string{}
	pg := postgresUnits{ix: ix}
	for i := range s.Calls {
		c := &s.Calls[i]
		if c.Proto == protoPostgres {
			// every call, set-up included, in order: a unit may span calls
			for _, u := range pg.units(c) {
				if u.req.setup {
					continue
				}
				du := out[c.Dst]
				if du == nil {
					du = &dstUnits{byOp: map[string][]int{}}
					out[c.Dst] = du
				}
				u.call = i
				du.byOp[u.req.op] = append(du.byOp[u.req.op], len(du.units))
				du.units = append(du.units, u)
			}
			continue
		}
		if c.Proto == protoMySQL {
			if p := lastMySQLMessage(c.Request); len(p) > 1 && p[0] == mysql.ComStmtPrepare {
				if id, ok := mysql.StmtID(c.Response); ok {
					stmts[connStmt{c.Conn, id}] = string(p[1:])
					stmts[connStmt{-1, id}] = string(p[1:])
				}
			}
		}
		if c.Setup {
			continue
		}
		lookup := func(id uint32) (string, bool) {
			if q, ok := stmts[connStmt{c.Conn, id}]; ok {
				return q, true
			}
			if q, ok := stmts[connStmt{-1, id}]; ok {
				return q, true
			}
			return ix.stmtSQL(c.Dst, id)
		}
		du := out[c.Dst]
		if du == nil {
			du = &dstUnits{byOp: map[string][]int{}}
			out[c.Dst] = du
		}
		for _, u := range splitCall(c, lookup) {
			u.call = i
			du.byOp[u.req.op] = append(du.byOp[u.req.op], len(du.units))
			du.units = append(du.units, u)
		}
	}
	return out
}

// splitCall computes the units of one recorded call.
func splitCall(c *recording.Call, stmtSQL func(uint32) (string, bool)) []unit {
	if stmtSQL == nil {
		stmtSQL = func(uint32) (string, bool) { return "", false }
	}
	whole := func(r request) []unit { return []unit{{req: r, resp: c.Response, seq: c.Seq}} }
	switch c.Proto {
	case protoHTTP:
		h, n, err := http1.RequestLen(c.Request)
		if err != nil || n == 0 {
			return whole(request{raw: c.Request, op: "?", canon: c.Request, body: c.Request})
		}
		return whole(httpRequest(c.Request[:n], h, 64<<20))
	case protoRedis:
		return splitRedis(c)
	case protoMySQL:
		return splitMySQL(c, stmtSQL)
	}
	return whole(rawRequest(c.Request))
}

// splitRedis makes one unit per command of a recorded pipeline when the
// replies can be paired with the commands, else one unit for the call.
func splitRedis(c *recording.Call) []unit {
	var units []unit
	req, resp := c.Request, c.Response
	for len(req) > 0 {
		args, n, err := redis.ParseCommand(req, len(req))
		if err != nil || n == 0 {
			break
		}
		m, err := redis.ReplyLen(resp)
		if err != nil || m == 0 {
			break
		}
		units = append(units, unit{req: redisRequest(req[:n], args), resp: resp[:m], seq: c.Seq})
		req, resp = req[n:], resp[m:]
	}
	if len(req) == 0 && len(resp) == 0 && len(units) > 0 {
		return units
	}
	r := request{raw: c.Request, op: "?", canon: c.Request}
	if args, n, err := redis.ParseCommand(c.Request, len(c.Request)); err == nil && n > 0 {
		r = redisRequest(c.Request, args)
	}
	return []unit{{req: r, resp: c.Response, seq: c.Seq}}
}

// splitMySQL makes one unit per command of a recorded call: commands without
// an answer (COM_STMT_CLOSE) may precede, in the same write, the command the
// response answers.
func splitMySQL(c *recording.Call, stmtSQL func(uint32) (string, bool)) []unit {
	var units []unit
	req := c.Request
	for len(req) > 0 {
		p, _, n, err := mysql.NextMessage(req, 1<<30)
		if err != nil || n == 0 {
			break
		}
		units = append(units, unit{req: mysqlRequest(req[:n], p, stmtSQL), seq: c.Seq})
		req = req[n:]
	}
	if len(units) == 0 || len(req) > 0 {
		return []unit{{req: request{raw: c.Request, op: "?", canon: c.Request, body: c.Request}, resp: c.Response, seq: c.Seq}}
	}
	units[len(units)-1].resp = c.Response
	return units
}

// lastMySQLMessage returns the payload of the last command in a recorded
// request (the one the recorded response answers).
func lastMySQLMessage(req []byte) []byte {
	var last []byte
	for len(req) > 0 {
		p, _, n, err := mysql.NextMessage(req, 1<<30)
		if err != nil || n == 0 {
			return nil
		}
		last, req = p, req[n:]
	}
	return last
}

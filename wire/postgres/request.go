package postgres

import (
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/retrace-dev/retrace/wire"
)

// stmt is a prepared statement as a connection knows it.
type stmt struct {
	sql  string
	oids []uint32 // parameter types given by Parse (0: let the server decide)
}

// names is what one connection has named: prepared statements (the
// unnamed one as "") and portals, each with the SQL it runs. A statement
// is known by its SQL, never by its name: names are chosen per
// connection by the driver (lib/pq numbers them, database/sql prepares
// per connection), and the same name on two connections, recorded or
// live, may be two statements.
type names struct {
	stmts   map[string]stmt
	portals map[string]string
	// fallback resolves a statement the connection never prepared in what
	// was read of it (a recorded connection whose prepare belongs to
	// another session): nil for none.
	fallback func(name string) (stmt, bool)
}

func newNames(fallback func(string) (stmt, bool)) *names {
	return &names{stmts: map[string]stmt{}, portals: map[string]string{}, fallback: fallback}
}

func (n *names) stmt(name string) (stmt, bool) {
	if s, ok := n.stmts[name]; ok {
		return s, true
	}
	if n.fallback != nil {
		return n.fallback(name)
	}
	return stmt{}, false
}

// maxNames bounds what a connection keeps named: past it (a client that
// prepares and never closes), new names are not remembered and their
// requests are known by name alone.
const maxNames = 1 << 14

// unitKind is what a unit asks of the server.
type unitKind uint8

const (
	kindOther   unitKind = iota
	kindSetup            // start-up packets, authentication, a ping: answered by the mock server itself
	kindPrepare          // only Parse, Describe of statements, Close and Sync: answered from any recording
	kindExec             // binds and executes statements
	kindQuery            // a simple Query
	kindCopy             // COPY data and its end
	kindQuit             // Terminate
)

// request computes the match features of one unit (client messages ms,
// raw their bytes) and notes what it names in n. A unit of nothing but
// prepares (Parse, Describe of statements, Close, Sync, Flush) is a
// wire.Request with Prepare set and, in Args, the SQL of each Parse and
// Describe in order: the book answers it from any recording when the
// trace's has no such unit.
func (n *names) request(raw []byte, ms []Message) (wire.Request, unitKind) {
	r := wire.Request{Raw: raw, Canon: raw}
	if len(ms) == 0 {
		r.Op = "?"
		return r, kindOther
	}
	if ms[0].Type == 0 || ms[0].Type == Password {
		r.Op, r.Setup, r.Local = "STARTUP", true, true
		if ms[0].Type == 0 && ms[0].Code == CancelRequestCode {
			r.Op, r.Quit, r.NoReply = "CANCEL", true, true
		}
		return r, kindSetup
	}
	var execs, preps, answered []string
	var args [][]byte
	canon := []byte(nil)
	kind := kindPrepare
	for _, m := range ms {
		switch m.Type {
		case Parse:
			var p pgproto3.Parse
			if p.Decode(m.Body) != nil {
				continue
			}
			if len(n.stmts) < maxNames || p.Name == "" {
				n.stmts[p.Name] = stmt{sql: p.Query, oids: p.ParameterOIDs}
			}
			preps = append(preps, p.Query)
			answered = append(answered, p.Query)
		case Describe:
			var d pgproto3.Describe
			if d.Decode(m.Body) != nil || d.ObjectType != 'S' {
				continue
			}
			if s, ok := n.stmt(d.Name); ok {
				preps = appendNew(preps, s.sql)
				answered = append(answered, s.sql)
			} else {
				preps = append(preps, "#"+d.Name)
				answered = append(answered, "")
			}
		case Bind:
			var b pgproto3.Bind
			if b.Decode(m.Body) != nil {
				continue
			}
			s, ok := n.stmt(b.PreparedStatement)
			q := s.sql
			if !ok {
				q = "#" + b.PreparedStatement
			}
			if len(n.portals) < maxNames || b.DestinationPortal == "" {
				n.portals[b.DestinationPortal] = q
			}
			kind = kindExec
			args = append(args, b.Parameters...)
		case Execute:
			var e pgproto3.Execute
			if e.Decode(m.Body) != nil {
				continue
			}
			q, ok := n.portals[e.Portal]
			if !ok {
				q = "#portal " + e.Portal
			}
			execs = append(execs, q)
			kind = kindExec
		case Close:
			var c pgproto3.Close
			if c.Decode(m.Body) == nil {
				if c.ObjectType == 'S' {
					delete(n.stmts, c.Name)
				} else {
					delete(n.portals, c.Name)
				}
			}
		case Query:
			q := CString(m.Body)
			if IsPing(q) {
				r.Op, r.Setup, r.Local = "PING", true, true
				return r, kindSetup
			}
			norm, lits := NormalizeSQL(q)
			r.Op, r.Key, r.Stmt = "QUERY "+norm, q, q
			// session settings configure the connection: answered from
			// any recording of the destination (SetupWrite)
			r.Setup = IsSessionSet(q)
			r.Canon = []byte(q)
			for _, l := range lits {
				r.Args = append(r.Args, []byte(l))
			}
			return r, kindQuery
		case CopyData:
			canon = append(canon, m.Body...)
			kind = kindCopy
		case CopyDone, CopyFail:
			kind = kindCopy
		case Terminate:
			r.Op, r.Quit, r.NoReply, r.Setup, r.Local = "TERMINATE", true, true, true, true
			return r, kindQuit
		case FunctionCall:
			kind = kindOther
			r.Op = "FUNCTION CALL"
		}
	}
	switch kind {
	case kindExec:
		key := strings.Join(execs, "; ")
		r.Op, r.Key, r.Stmt, r.Args = "EXECUTE "+normAll(execs), key, key, args
		c := append([]byte(key), 0)
		for _, a := range args {
			c = append(append(c, a...), 0)
		}
		r.Canon = c
	case kindPrepare:
		r.Op, r.Key, r.Prepare = "PREPARE "+normAll(preps), strings.Join(preps, "; "), true
		r.Args = make([][]byte, len(answered))
		for i, q := range answered {
			r.Args[i] = []byte(q)
		}
	case kindCopy:
		r.Op, r.Canon, r.Body = "COPY DATA", canon, canon
	}
	return r, kind
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

func normAll(qs []string) string {
	var b strings.Builder
	for i, q := range qs {
		if i > 0 {
			b.WriteString("; ")
		}
		n, _ := NormalizeSQL(q)
		b.WriteString(n)
	}
	return b.String()
}

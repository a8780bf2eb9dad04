package regress

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/replayer/diff"
	"github.com/retrace-dev/retrace/wire/mysql"
)

// MySQL downstream calls are compared command by command per destination,
// not call by call: a driver writes COM_STMT_CLOSE without waiting for an
// answer, so a recorded call may hold a close and the next command, and
// the replay may group its writes differently. The commands of the
// recording and of the replay are paired by content — the same SQL, or an
// execute of a statement prepared from the same SQL — then the rest in
// order by command; what stays unpaired was added or never made.

// A prepare left without a partner is not reported: preparing changes
// nothing, and the statement's executes are compared on their own (a
// changed statement shows as a changed "sql" when it pairs, or as executes
// added or never sent).
const (
	comStmtPrepare = mysql.ComStmtPrepare
	comStmtExecute = mysql.ComStmtExecute
)

// mysqlCmd is one command with where it came from.
type mysqlCmd struct {
	mysql.Command
	key   string   // pairing key
	ref   *CallRef // the call that carried it
	used  bool
	setup bool // connection set-up: paired when it can be, never reported
	// stmtSQL is the SQL a replayed statement command's statement was
	// prepared with (ObservedCall.Statement), when the mock server said.
	stmtSQL string
}

// mysqlFindings compares the MySQL traffic of one destination.
func mysqlFindings(rules *diff.Rules, api, dst string, s *recording.Session, rep *mockserver.TraceReport) ([]Finding, []CallDetail, bool) {
	stmtSQL := map[uint32]string{} // statement ids of the recording's prepares; the mock answers with them
	var rec []*mysqlCmd
	byCall := map[int][]*mysqlCmd{} // recorded commands by call
	for i := range s.Calls {
		c := &s.Calls[i]
		if c.Proto != "mysql" || c.Dst != dst {
			continue
		}
		cmds, ok := mysql.Commands(c.Request)
		if !ok {
			return nil, nil, false
		}
		if n := len(cmds); n > 0 && cmds[n-1].Cmd == comStmtPrepare {
			if id, ok := mysql.PrepareOK(c.Response); ok {
				stmtSQL[id] = cmds[n-1].SQL
			}
		}
		ref := &CallRef{Seq: -1, Matched: c.Seq, Proto: c.Proto, Dst: c.Dst, Summary: summarize(c.Proto, c.Request)}
		for _, m := range cmds {
			mc := &mysqlCmd{Command: m, ref: ref, setup: c.Setup}
			rec = append(rec, mc)
			byCall[c.Seq] = append(byCall[c.Seq], mc)
		}
	}
	var obs []*mysqlCmd
	for _, oc := range rep.Calls {
		if oc.Proto != "mysql" || oc.Dst != dst || oc.Proxied {
			continue
		}
		cmds, ok := mysql.Commands(oc.Request)
		if !ok {
			return nil, nil, false
		}
		ref := &CallRef{Seq: oc.Seq, Matched: oc.Matched, Proto: oc.Proto, Dst: oc.Dst, Summary: summarize(oc.Proto, oc.Request)}
		for _, m := range cmds {
			mc := &mysqlCmd{Command: m, ref: ref, setup: oc.Setup}
			if m.Stmt && len(cmds) == 1 && oc.Statement != "" {
				mc.stmtSQL = oc.Statement // the statement's SQL, as the mock server knew it
			}
			obs = append(obs, mc)
		}
	}
	key := func(m *mysqlCmd) string {
		switch {
		case m.SQL != "" || m.Cmd == mysql.ComQuery || m.Cmd == mysql.ComStmtPrepare:
			return strconv.Itoa(int(m.Cmd)) + ":" + m.SQL
		case m.Stmt && m.stmtSQL != "":
			return strconv.Itoa(int(m.Cmd)) + ":" + m.stmtSQL
		case m.Stmt:
			if q, ok := stmtSQL[m.StmtID]; ok {
				return strconv.Itoa(int(m.Cmd)) + ":" + q
			}
			return strconv.Itoa(int(m.Cmd)) + ":#" + strconv.FormatUint(uint64(m.StmtID), 10)
		}
		return strconv.Itoa(int(m.Cmd)) + ":" + string(m.Packet)
	}
	for _, m := range rec {
		m.key = key(m)
	}
	for _, m := range obs {
		m.key = key(m)
		if !m.Stmt || m.ref.Matched < 0 {
			continue
		}
		// The mock server may number statements its own way: a statement
		// command is known by the recorded call it was matched to.
		for _, r := range byCall[m.ref.Matched] {
			if r.Cmd == m.Cmd {
				m.key = r.key
				break
			}
		}
	}
	var out []Finding
	var details []CallDetail
	compare := func(r, o *mysqlCmd) {
		r.used, o.used = true, true
		if r.setup || o.setup {
			return // set-up traffic is the mock server's business
		}
		ds := rules.CompareCalls(api, "mysql", dst, r.WithoutStmtID(), o.WithoutStmtID())
		for _, d := range ds {
			out = append(out, Finding{Difference: d, Where: InDownstream, Call: o.ref})
		}
		details = append(details, CallDetail{CallRef: *o.ref, Recorded: r.Packet, Replayed: o.Packet, Diffs: ds})
	}
	// Statements the recorded request prepared and never executed: it was
	// cancelled (an errgroup sibling failed) between the prepare's answer
	// and the execute. A replay that gets to the execute first is timing,
	// not a change: such an execute is not reported as added.
	abandoned := map[string]bool{}
	for _, r := range rec {
		if r.Cmd == comStmtPrepare {
			abandoned[strconv.Itoa(comStmtExecute)+":"+r.SQL] = true
		}
	}
	for _, r := range rec {
		if r.Cmd == comStmtExecute {
			delete(abandoned, r.key)
		}
	}
	skipAbandoned := func() {
		for _, o := range obs {
			if !o.used && o.Cmd == comStmtExecute && abandoned[o.key] {
				o.used = true
			}
		}
	}
	// Pass 1: same key. Pass 2: the rest in order, by command byte, once
	// the executes of abandoned statements are set aside.
	for pass := 0; pass < 2; pass++ {
		if pass == 1 {
			skipAbandoned()
		}
		for _, o := range obs {
			if o.used {
				continue
			}
			for _, r := range rec {
				if !r.used && (pass == 0 && r.key == o.key || pass == 1 && r.Cmd == o.Cmd && !r.setup && !o.setup) {
					compare(r, o)
					break
				}
			}
		}
	}
	for _, o := range obs {
		if !o.used && !o.setup && o.Cmd != comStmtPrepare && !rules.Ignores(api, diff.ScopeDownstream, dst, "call") {
			d := diff.Difference{Path: "call", Kind: diff.Added, Got: sqlSummary(o), Note: "no recorded command like it"}
			out = append(out, Finding{Difference: d, Where: InDownstream, Call: o.ref})
			details = append(details, CallDetail{CallRef: *o.ref, Replayed: o.Packet, Diffs: []diff.Difference{d}})
		}
	}
	for _, r := range rec {
		if !r.used && !r.setup && r.Cmd != comStmtPrepare && !rules.Ignores(api, diff.ScopeDownstream, dst, "call") {
			d := diff.Difference{Path: "call", Kind: diff.Removed, Want: sqlSummary(r), Note: "recorded command never sent"}
			out = append(out, Finding{Difference: d, Where: InDownstream, Call: r.ref})
			details = append(details, CallDetail{CallRef: *r.ref, Recorded: r.Packet, Diffs: []diff.Difference{d}})
		}
	}
	return out, details, true
}

func sqlSummary(m *mysqlCmd) string {
	if m.SQL != "" {
		return cut(m.SQL, 120)
	}
	_, k, _ := strings.Cut(m.key, ":")
	switch m.Cmd {
	case mysql.ComStmtExecute:
		return "execute " + cut(k, 110)
	case mysql.ComStmtSendLongData:
		return "send long data " + cut(k, 100)
	case mysql.ComStmtReset:
		return "reset " + cut(k, 110)
	}
	return fmt.Sprintf("command 0x%02x %s", m.Cmd, cut(strconv.Quote(k), 100))
}

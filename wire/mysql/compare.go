package mysql

import (
	"strconv"

	"github.com/retrace-dev/retrace/wire"
)

var _ wire.Comparer = protocol{}

// CompareForm is what the downstream diff compares of a client payload:
// every command but COM_STMT_CLOSE and COM_QUIT (Commands), as "command"
// (its byte, 0x03), "sql" (white space collapsed: CollapseSQL), and for
// statement commands "stmt_id" and "params[i]" (an execute's typed
// values) or "params" (the rest of the packet, when the values do not
// decode); other commands' payloads as "bytes". Several commands are
// "packet[n].…".
func (protocol) CompareForm(msg []byte) (wire.Decoded, bool) {
	cmds, ok := Commands(msg)
	if !ok {
		return wire.Decoded{}, false
	}
	var d wire.Decoded
	for n, c := range cmds {
		pre := ""
		if len(cmds) > 1 {
			pre = "packet[" + strconv.Itoa(n) + "]."
		}
		add := func(path, v string) { d.Fields = append(d.Fields, wire.Field{Path: pre + path, Value: v}) }
		add("command", "0x"+strconv.FormatUint(uint64(c.Cmd)|0x100, 16)[1:])
		switch {
		case c.Cmd == ComQuery || c.Cmd == ComStmtPrepare:
			add("sql", c.SQL)
		case c.Stmt:
			add("stmt_id", strconv.FormatUint(uint64(c.StmtID), 10))
			ps, ok := []string(nil), false
			if c.Cmd == ComStmtExecute {
				ps, ok = ExecuteParams(c.Rest)
			}
			if ok {
				for i, p := range ps {
					add("params["+strconv.Itoa(i)+"]", p)
				}
			} else if len(c.Rest) > 0 {
				add("params", string(c.Rest))
			}
		case len(c.Rest) > 0:
			add("bytes", string(c.Rest))
		}
	}
	return d, true
}

package postgres

import (
	"strings"

	"github.com/retrace-dev/retrace/wire"
)

var _ wire.Comparer = protocol{}

// CompareForm is what the downstream diff compares of a client payload:
// each statement run or prepared, white space collapsed ("sql", or
// "sql[i]" for several), every bound parameter decoded by type
// ("params[j]"), COPY data ("copy"). Statement and portal names are the
// connection's own and are left out, and so is a payload of Close, Sync,
// Flush and Terminate only (nothing to compare).
func (protocol) CompareForm(msg []byte) (wire.Decoded, bool) {
	d, ok := DecodeRequest(msg, nil)
	if !ok {
		return wire.Decoded{}, false
	}
	out := wire.Decoded{Text: d.Text}
	for _, f := range d.Fields {
		switch {
		case f.Path == "sql" || strings.HasPrefix(f.Path, "sql["):
			out.Fields = append(out.Fields, wire.Field{Path: f.Path, Value: strings.Join(strings.Fields(f.Value), " ")})
		case strings.HasPrefix(f.Path, "params[") || f.Path == "copy":
			out.Fields = append(out.Fields, f)
		}
	}
	return out, true
}

package postgres

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/retrace-dev/retrace/wire"
)

// TypesFunc returns the parameter types of the statement prepared from
// sql, as a server described them; nil when unknown.
type TypesFunc func(sql string) []uint32

// Decode returns a human-readable form of a burst of whole messages sent
// by side: for a client, each message with the statements' typed
// parameters ("BIND select … [42, \"x\"]"), fields "sql" (or "sql[i]":
// each statement text run or prepared, in order), "statement[i]" (a
// prepared statement the burst binds by name without its Parse: names
// are the connection's own), "params[j]" (every parameter bound, in
// order) and "copy" (COPY data); for a server, rows decoded by their
// RowDescription, command tags and errors, fields "rows[i].column",
// "command", "error".
func (protocol) Decode(side wire.Side, b []byte) (wire.Decoded, bool) {
	if side == wire.Server {
		return DecodeAnswer(b)
	}
	return DecodeRequest(b, nil)
}

// DecodeRequest decodes client messages; types, when not nil, gives the
// parameter types of statements whose Parse is not in b (a statement
// prepared by an earlier call).
func DecodeRequest(b []byte, types TypesFunc) (wire.Decoded, bool) {
	var d wire.Decoded
	var lines []string
	n := newNames(nil)
	nsql, nparam, nstmt := 0, 0, 0
	last := ""
	addSQL := func(q string) {
		if q == last {
			return
		}
		last = q
		d.Fields = append(d.Fields, wire.Field{Path: "sql", Value: q})
		nsql++
	}
	var copyData []byte
	_, err := Messages(b, true, len(b) > 0 && b[0] == 0, func(m Message) bool {
		switch m.Type {
		case 0:
			text := startupText(m)
			lines = append(lines, text)
			d.Fields = append(d.Fields, startupFields(m, text)...)
		case Password:
			lines = append(lines, "AUTHENTICATION (password or SASL message)")
			d.Fields = append(d.Fields, wire.Field{Path: "message", Value: "authentication"})
		case Query:
			q := CString(m.Body)
			lines = append(lines, "QUERY "+q)
			addSQL(q)
		case Parse:
			var p pgproto3.Parse
			if p.Decode(m.Body) != nil {
				return false
			}
			n.stmts[p.Name] = stmt{sql: p.Query, oids: p.ParameterOIDs}
			lines = append(lines, fmt.Sprintf("PARSE %q %s", p.Name, p.Query))
			addSQL(p.Query)
		case Bind:
			var bd pgproto3.Bind
			if bd.Decode(m.Body) != nil {
				return false
			}
			s, _ := n.stmt(bd.PreparedStatement)
			oids := s.oids
			if len(oids) == 0 && types != nil && s.sql != "" {
				oids = types(s.sql)
			}
			vals := make([]string, len(bd.Parameters))
			for i, v := range bd.Parameters {
				var oid uint32
				if i < len(oids) {
					oid = oids[i]
				}
				vals[i] = FormatValue(oid, formatOf(bd.ParameterFormatCodes, i), v)
				d.Fields = append(d.Fields, wire.Field{Path: "params[" + strconv.Itoa(nparam) + "]", Value: vals[i]})
				nparam++
			}
			what := s.sql
			if what == "" {
				what = "statement " + strconv.Quote(bd.PreparedStatement)
				d.Fields = append(d.Fields, wire.Field{Path: "statement[" + strconv.Itoa(nstmt) + "]", Value: bd.PreparedStatement})
				nstmt++
			} else {
				addSQL(s.sql)
			}
			lines = append(lines, fmt.Sprintf("BIND %s [%s]", what, strings.Join(vals, ", ")))
		case Describe:
			if len(m.Body) > 0 {
				lines = append(lines, fmt.Sprintf("DESCRIBE %c %q", m.Body[0], CString(m.Body[1:])))
			}
		case Execute:
			lines = append(lines, fmt.Sprintf("EXECUTE %q", CString(m.Body)))
		case Close:
			if len(m.Body) > 0 {
				lines = append(lines, fmt.Sprintf("CLOSE %c %q", m.Body[0], CString(m.Body[1:])))
			}
		case Sync:
			lines = append(lines, "SYNC")
		case Flush:
			lines = append(lines, "FLUSH")
		case CopyData:
			lines = append(lines, "COPY DATA "+clipText(string(m.Body)))
			copyData = append(copyData, m.Body...)
		case CopyDone:
			lines = append(lines, "COPY DONE")
		case CopyFail:
			lines = append(lines, "COPY FAIL "+CString(m.Body))
		case Terminate:
			lines = append(lines, "TERMINATE")
			d.Fields = append(d.Fields, wire.Field{Path: "message", Value: "Terminate"})
		default:
			lines = append(lines, fmt.Sprintf("message %q (%d bytes)", m.Type, len(m.Body)))
		}
		return true
	})
	if err != nil || len(lines) == 0 {
		return wire.Decoded{}, false
	}
	if nsql > 1 {
		i := 0
		for j := range d.Fields {
			if d.Fields[j].Path == "sql" {
				d.Fields[j].Path = "sql[" + strconv.Itoa(i) + "]"
				i++
			}
		}
	}
	if copyData != nil {
		d.Fields = append(d.Fields, wire.Field{Path: "copy", Value: string(copyData)})
	}
	d.Text = strings.Join(lines, "; ")
	return d, true
}

func formatOf(codes []int16, i int) int16 {
	switch {
	case len(codes) == 0:
		return 0
	case len(codes) == 1:
		return codes[0]
	case i < len(codes):
		return codes[i]
	}
	return 0
}

// startupFields are a start-up packet's fields: "message" (its kind) and
// a StartupMessage's parameters as "startup.NAME".
func startupFields(m Message, text string) []wire.Field {
	name, _, _ := strings.Cut(text, " ")
	out := []wire.Field{{Path: "message", Value: name}}
	if m.IsStartup() {
		parts := strings.Split(strings.TrimRight(string(m.Body), "\x00"), "\x00")
		for i := 0; i+1 < len(parts); i += 2 {
			out = append(out, wire.Field{Path: "startup." + parts[i], Value: parts[i+1]})
		}
	}
	return out
}

func startupText(m Message) string {
	switch m.Code {
	case SSLRequestCode:
		return "SSLRequest"
	case GSSENCRequestCode:
		return "GSSENCRequest"
	case CancelRequestCode:
		return "CancelRequest"
	}
	parts := strings.Split(strings.TrimRight(string(m.Body), "\x00"), "\x00")
	var kv []string
	for i := 0; i+1 < len(parts); i += 2 {
		kv = append(kv, parts[i]+"="+parts[i+1])
	}
	return "StartupMessage " + strings.Join(kv, " ")
}

// DecodeAnswer decodes server messages: rows by the RowDescription before
// them, command tags, errors and notices.
func DecodeAnswer(b []byte) (wire.Decoded, bool) {
	var d wire.Decoded
	var lines []string
	var cols []pgproto3.FieldDescription
	row := 0
	_, err := Messages(b, false, false, func(m Message) bool {
		switch m.Type {
		case RowDescription:
			var rd pgproto3.RowDescription
			if rd.Decode(m.Body) != nil {
				return false
			}
			cols = rd.Fields
			names := make([]string, len(cols))
			for i, c := range cols {
				names[i] = string(c.Name)
			}
			lines = append(lines, "columns "+strings.Join(names, ", "))
		case DataRow:
			var dr pgproto3.DataRow
			if dr.Decode(m.Body) != nil {
				return false
			}
			vals := make([]string, len(dr.Values))
			for i, v := range dr.Values {
				name, oid, format := "c"+strconv.Itoa(i), uint32(0), int16(0)
				if i < len(cols) {
					name, oid, format = string(cols[i].Name), cols[i].DataTypeOID, cols[i].Format
				}
				vals[i] = FormatValue(oid, format, v)
				d.Fields = append(d.Fields, wire.Field{Path: fmt.Sprintf("rows[%d].%s", row, name), Value: vals[i]})
			}
			lines = append(lines, "row "+strings.Join(vals, ", "))
			row++
		case CommandComplete:
			tag := CString(m.Body)
			lines = append(lines, tag)
			d.Fields = append(d.Fields, wire.Field{Path: "command", Value: tag})
		case ErrorResponse, NoticeResponse:
			var e pgproto3.ErrorResponse
			if e.Decode(m.Body) != nil {
				return false
			}
			text := fmt.Sprintf("%s %s: %s", e.Severity, e.Code, e.Message)
			lines = append(lines, text)
			if m.Type == ErrorResponse {
				d.Fields = append(d.Fields, wire.Field{Path: "error", Value: text})
			}
		case NotificationResponse:
			var nr pgproto3.NotificationResponse
			if nr.Decode(m.Body) == nil {
				lines = append(lines, fmt.Sprintf("NOTIFY %s %q", nr.Channel, nr.Payload))
			}
		case ReadyForQuery:
			if len(m.Body) == 1 {
				lines = append(lines, "ready "+string(m.Body))
			}
		case Authentication:
			lines = append(lines, "authentication")
		case ParameterStatus:
			var ps pgproto3.ParameterStatus
			if ps.Decode(m.Body) == nil {
				lines = append(lines, ps.Name+"="+ps.Value)
			}
		case CopyInResponse:
			lines = append(lines, "COPY IN")
		case CopyOutResponse:
			lines = append(lines, "COPY OUT")
		case CopyData:
			lines = append(lines, "COPY DATA "+clipText(string(m.Body)))
		case EmptyQueryResponse:
			lines = append(lines, "empty query")
		}
		return true
	})
	if err != nil || (len(lines) == 0 && len(b) > 0) {
		return wire.Decoded{}, false
	}
	d.Text = strings.Join(lines, "; ")
	return d, true
}

func clipText(s string) string {
	if len(s) > 80 {
		return strconv.Quote(s[:80]) + "…"
	}
	return strconv.Quote(s)
}

package diff

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// pgExec is a PostgreSQL unit as pgx sends it in exec mode: the
// statement with its parameter types, and its parameters in binary.
func pgExec(sql string, id int64, name string) string {
	var b []byte
	for _, m := range []interface{ Encode([]byte) ([]byte, error) }{
		&pgproto3.Parse{Query: sql, ParameterOIDs: []uint32{20, 25}},
		&pgproto3.Bind{ParameterFormatCodes: []int16{1, 0}, Parameters: [][]byte{binary.BigEndian.AppendUint64(nil, uint64(id)), []byte(name)}},
		&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{},
	} {
		b, _ = m.Encode(b)
	}
	return string(b)
}

func pgBindNamed(stmt string, id int64) string {
	b, _ := (&pgproto3.Bind{PreparedStatement: stmt, ParameterFormatCodes: []int16{0}, Parameters: [][]byte{[]byte(fmt.Sprint(id))}}).Encode(nil)
	b, _ = (&pgproto3.Execute{}).Encode(b)
	b, _ = (&pgproto3.Sync{}).Encode(b)
	return string(b)
}

func pgQuery(q string) string {
	b, _ := (&pgproto3.Query{String: q}).Encode(nil)
	return string(b)
}

func TestComparePostgres(t *testing.T) {
	const q = "update t set name = $2 where id = $1"
	cases := []struct {
		name, want, got, diffs, contain string
	}{
		{"same", pgExec(q, 7, "ann"), pgExec(q, 7, "ann"), "", ""},
		{"typed parameter", pgExec(q, 7, "ann"), pgExec(q, 8, "ann"), "params[0] changed", "7 → 8"},
		{"text parameter", pgExec(q, 7, "ann"), pgExec(q, 7, "bob"), "params[1] changed", `"ann" → "bob"`},
		{"statement", pgExec(q, 7, "ann"), pgExec("update t set name = $2 where id = $1 and v = 0", 7, "ann"), "sql changed", ""},
		{"white space", pgExec(q, 7, "ann"), pgExec("update t  set name = $2\n where id = $1", 7, "ann"), "", ""},
		{"statement names are the connection's", pgBindNamed("1", 5), pgBindNamed("7", 5), "", ""},
		{"named statement's parameter", pgBindNamed("1", 5), pgBindNamed("7", 6), "params[0] changed", `"5" → "6"`},
		{"simple query", pgQuery("select 1"), pgQuery("select 2"), "sql changed", "select 2"},
		{"extra statement", pgQuery("select 1"), pgQuery("select 1") + pgExec(q, 1, "x"), "params[0] added, params[1] added, sql[1] added", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ds := mustRules(t).CompareCalls("GET /x", "postgres", "db:5432", []byte(tc.want), []byte(tc.got))
			if got := paths(ds); got != tc.diffs {
				t.Errorf("differences %q, want %q (%v)", got, tc.diffs, ds)
			}
			if tc.contain != "" && !strings.Contains(fmt.Sprint(ds), tc.contain) {
				t.Errorf("%v does not mention %q", ds, tc.contain)
			}
		})
	}
	close, _ := (&pgproto3.Close{ObjectType: 'S', Name: "s1"}).Encode(nil)
	close, _ = (&pgproto3.Sync{}).Encode(close)
	if !Insignificant("postgres", close) || Insignificant("postgres", []byte(pgQuery("select 1"))) {
		t.Error("Insignificant: a Close and Sync is, a query is not")
	}
}

package postgres_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/postgres"
	"github.com/retrace-dev/retrace/wire/wiretest"
)

func pgMaskRules() *wiretest.Rules {
	return &wiretest.Rules{Patterns: []wiretest.Pattern{
		wiretest.Pat(`\b(?:\d[\s-]?){12,18}\d\b`, "[card]"),
		wiretest.Pat(`(?i)(bearer\s+)[A-Za-z0-9._-]+`, "${1}[token]"),
	}}
}

var (
	pgBind = func(text, binText string) []byte {
		return enc(&pgproto3.Bind{PreparedStatement: "s1", ParameterFormatCodes: []int16{0, 1, 1},
			Parameters: [][]byte{[]byte(text), []byte(binText), {0, 0, 0, 42}}})
	}
	pgRows = func(v string) []byte {
		return enc(&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{
			{Name: []byte("card"), DataTypeOID: 25, Format: 1}, {Name: []byte("n"), DataTypeOID: 20, Format: 1}}},
			&pgproto3.DataRow{Values: [][]byte{[]byte(v), []byte("12345678")}},
			&pgproto3.DataRow{Values: [][]byte{nil, []byte("\x00\x00\x00\x00\x00\x00\x00\x01")}},
			&pgproto3.CommandComplete{CommandTag: []byte("SELECT 2")}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	}
)

var pgMaskCases = []wiretest.MaskCase{
	{Name: "query literals",
		In:   enc(&pgproto3.Query{String: `SELECT "4111111111111111" FROM t WHERE c = '4111 1111 1111 1111' AND n = 4111111111111111 AND e = E'Bearer x\'y' AND d = $q$Bearer abc$q$ AND p = $1 -- 4111111111111111`}),
		Want: enc(&pgproto3.Query{String: `SELECT "4111111111111111" FROM t WHERE c = '[card]' AND n = [card] AND e = E'Bearer [token]\'y' AND d = $q$Bearer [token]$q$ AND p = $1 -- 4111111111111111`})},
	{Name: "parse and bind: text parameters, and binary ones of text type",
		In: append(enc(&pgproto3.Parse{Name: "s1", Query: "INSERT INTO t VALUES ($1, $2, $3, '4111111111111111')", ParameterOIDs: []uint32{25, 25, 23}}),
			pgBind("4111111111111111", "Bearer abc")...),
		Want: append(enc(&pgproto3.Parse{Name: "s1", Query: "INSERT INTO t VALUES ($1, $2, $3, '[card]')", ParameterOIDs: []uint32{25, 25, 23}}),
			pgBind("[card]", "Bearer [token]")...)},
	{Name: "bind of a statement parsed earlier: printable binary values",
		In: pgBind("4111111111111111", "Bearer abc"), Want: pgBind("[card]", "Bearer [token]")},
	{Name: "start-up and password kept",
		In:   append(startup("user", "4111111111111111", "database", "d"), enc(&pgproto3.PasswordMessage{Password: "Bearer secret"})...),
		Want: append(startup("user", "4111111111111111", "database", "d"), enc(&pgproto3.PasswordMessage{Password: "Bearer secret"})...)},
	{Name: "copy data", In: enc(&pgproto3.CopyData{Data: []byte("a\t4111111111111111\n")}),
		Want: enc(&pgproto3.CopyData{Data: []byte("a\t[card]\n")})},
	{Name: "rows by their description", Side: wire.Server, In: pgRows("4111111111111111"), Want: pgRows("[card]")},
	{Name: "error fields but severity and code", Side: wire.Server,
		In: enc(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "23505", Message: "duplicate key",
			Detail: "Key (card)=(4111111111111111) already exists."}),
		Want: enc(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "23505", Message: "duplicate key",
			Detail: "Key (card)=([card]) already exists."})},
	{Name: "notification payload", Side: wire.Server,
		In:   enc(&pgproto3.NotificationResponse{PID: 7, Channel: "c", Payload: "Bearer abc"}),
		Want: enc(&pgproto3.NotificationResponse{PID: 7, Channel: "c", Payload: "Bearer [token]"})},
	{Name: "cut by the cap", In: append(enc(&pgproto3.Sync{}), []byte("Q\x00\x00\x00\x40SELECT '4111111111111111")...),
		Want: append(enc(&pgproto3.Sync{}), []byte("Q\x00\x00\x00\x40SELECT '[card]")...)},
}

func TestMaskValues(t *testing.T) {
	m, ok := postgres.Protocol.(wire.Masker)
	if !ok {
		t.Fatal("postgres.Protocol is no wire.Masker")
	}
	wiretest.Masks(t, m, pgMaskRules, pgMaskCases...)
}

func FuzzMaskValues(f *testing.F) {
	wiretest.FuzzMasker(f, postgres.Protocol.(wire.Masker), pgMaskRules, wiretest.Whole(postgres.Protocol), pgMaskCases...)
}

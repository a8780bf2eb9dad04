package postgres_test

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/postgres"
)

type encodable interface {
	Encode([]byte) ([]byte, error)
}

func enc(ms ...encodable) []byte {
	var b []byte
	for _, m := range ms {
		var err error
		if b, err = m.Encode(b); err != nil {
			panic(err)
		}
	}
	return b
}

const selectSQL = "select name from t where id = $1"

// prepareCall is a recorded prepare of selectSQL on one connection, as
// pgx's statement cache sends it.
func prepareCall(name string) wire.Call {
	req := enc(&pgproto3.Parse{Name: name, Query: selectSQL}, &pgproto3.Describe{ObjectType: 'S', Name: name}, &pgproto3.Sync{})
	resp := enc(&pgproto3.ParseComplete{}, &pgproto3.ParameterDescription{ParameterOIDs: []uint32{23}},
		&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("name"), DataTypeOID: 25, DataTypeSize: -1}}},
		&pgproto3.ReadyForQuery{TxStatus: 'I'})
	return wire.Call{Request: req, Response: resp, Conn: 1}
}

// execCall is a recorded execute of statement name with id, answering
// row.
func execCall(name string, id int32, row string) wire.Call {
	req := enc(&pgproto3.Bind{PreparedStatement: name, ParameterFormatCodes: []int16{1},
		Parameters: [][]byte{binary.BigEndian.AppendUint32(nil, uint32(id))}},
		&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{})
	resp := enc(&pgproto3.BindComplete{},
		&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("name"), DataTypeOID: 25, DataTypeSize: -1}}},
		&pgproto3.DataRow{Values: [][]byte{[]byte(row)}}, &pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")},
		&pgproto3.ReadyForQuery{TxStatus: 'I'})
	return wire.Call{Request: req, Response: resp, Conn: 1}
}

func TestSessionUnits(t *testing.T) {
	p := postgres.Protocol
	b := p.NewBook()
	prep, exec := prepareCall("s1"), execCall("s1", 42, "ann")
	b.Learn(prep)
	b.Learn(exec)
	s := p.NewSession(b)
	units := append(s.Units(prep), s.Units(exec)...)
	if len(units) != 2 {
		t.Fatalf("%d units, want 2", len(units))
	}
	if u := units[0]; u.Req.Op != "PREPARE "+selectSQL || !u.Req.Prepare || !u.Req.Setup || u.Req.Local {
		t.Errorf("prepare unit: %+v", u.Req)
	}
	u := units[1]
	if u.Req.Op != "EXECUTE "+selectSQL || u.Req.Stmt != selectSQL || u.Req.Local || len(u.Req.Args) != 1 || !bytes.Equal(u.Resp, exec.Response) {
		t.Errorf("execute unit: %+v", u.Req)
	}
	// A recording whose connection had the statement prepared by another
	// session: the Bind is known by the name the book learned.
	s2 := p.NewSession(b)
	if us := s2.Units(execCall("s1", 7, "bob")); len(us) != 1 || us[0].Req.Op != "EXECUTE "+selectSQL {
		t.Errorf("execute of a statement prepared elsewhere: %+v", us)
	}
}

// TestSessionSplitAnywhere cuts a connection's recorded stream into two
// calls at every byte of the answer: the units are the same.
func TestSessionSplitAnywhere(t *testing.T) {
	p := postgres.Protocol
	prep, exec := prepareCall("s1"), execCall("s1", 42, "ann")
	copyReq := enc(&pgproto3.Query{String: "copy t from stdin"})
	copyResp := enc(&pgproto3.CopyInResponse{ColumnFormatCodes: []uint16{0}})
	dataReq := enc(&pgproto3.CopyData{Data: []byte("1\tann\n")}, &pgproto3.CopyDone{})
	dataResp := enc(&pgproto3.CommandComplete{CommandTag: []byte("COPY 1")}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	// an error in the middle of a pipeline: the server skips to Sync
	badReq := enc(&pgproto3.Parse{Query: "selec 1"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
	badResp := enc(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "42601", Message: "syntax error"}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	notice := enc(&pgproto3.NoticeResponse{Severity: "NOTICE", Message: "hi"})
	req := bytes.Join([][]byte{prep.Request, exec.Request, copyReq, dataReq, badReq}, nil)
	resp := bytes.Join([][]byte{prep.Response, notice, exec.Response, copyResp, dataResp, badResp}, nil)
	ops := func(us []wire.Unit) string {
		var s []string
		for _, u := range us {
			s = append(s, u.Req.Op+" → "+string(u.Resp))
		}
		return strings.Join(s, "\n")
	}
	whole := p.NewSession(p.NewBook()).Units(wire.Call{Request: req, Response: resp, Conn: 1})
	if len(whole) != 5 {
		t.Fatalf("%d units:\n%s", len(whole), ops(whole))
	}
	for _, want := range []string{"PREPARE", "EXECUTE", "QUERY copy", "COPY DATA", "EXECUTE selec"} {
		found := false
		for _, u := range whole {
			found = found || strings.HasPrefix(u.Req.Op, want)
		}
		if !found {
			t.Errorf("no %s unit in\n%s", want, ops(whole))
		}
	}
	for cut := 1; cut < len(resp); cut++ {
		s := p.NewSession(p.NewBook())
		// the request all in the first call, its answer split
		got := append(s.Units(wire.Call{Request: req, Response: resp[:cut], Conn: 1}),
			s.Units(wire.Call{Request: nil, Response: resp[cut:], Conn: 1})...)
		if ops(got) != ops(whole) {
			t.Fatalf("answer cut at %d:\n%s\nwant\n%s", cut, ops(got), ops(whole))
		}
	}
}

// answer runs one request through an answerer the way the mock server
// does: Next, then Synth for a local request, else Reply with resp, or
// with the book's Fallback, or Missing.
func answer(t *testing.T, a wire.Answerer, b wire.Book, in []byte, resp []byte) (wire.Request, []byte) {
	t.Helper()
	r, n, _, err := a.Next(in)
	if err != nil || n != len(in) {
		t.Fatalf("Next(%q) = %d, %v; want all %d bytes", in, n, err, len(in))
	}
	switch {
	case r.Local:
		return r, a.Synth(&r)
	case resp != nil:
		return r, a.Reply(&r, resp)
	}
	if resp, _, ok := b.Fallback(&r); ok {
		return r, a.Reply(&r, resp)
	}
	return r, a.Missing(&r, "no recorded answer")
}

func types(t *testing.T, b []byte) string {
	t.Helper()
	var s []byte
	if _, err := postgres.Messages(b, false, false, func(m postgres.Message) bool { s = append(s, m.Type); return true }); err != nil {
		t.Fatal(err)
	}
	return string(s)
}

func TestAnswererStartup(t *testing.T) {
	p := postgres.Protocol
	b := p.NewBook()
	// a recorded SCRAM start-up: its last answer reports the parameters
	b.Learn(wire.Call{Request: startup("user", "u"), Response: enc(&pgproto3.AuthenticationSASL{AuthMechanisms: []string{"SCRAM-SHA-256"}}), Setup: true})
	b.Learn(wire.Call{Request: msg('p', "x"), Setup: true, Response: enc(&pgproto3.AuthenticationSASLFinal{Data: []byte("v=x")}, &pgproto3.AuthenticationOk{},
		&pgproto3.ParameterStatus{Name: "server_version", Value: "15.8"}, &pgproto3.BackendKeyData{ProcessID: 7, SecretKey: []byte{0, 0, 0, 9}},
		&pgproto3.ReadyForQuery{TxStatus: 'I'})})
	a := p.NewAnswerer(wire.Env{Book: b, ConnID: 3})
	// no recorded SSLRequest: a client that asks wants TLS
	if r, out := answer(t, a, b, request(postgres.SSLRequestCode), nil); string(out) != "S" || !r.Setup {
		t.Fatalf("SSLRequest answered %q (%+v)", out, r)
	}
	r, out := answer(t, a, b, startup("user", "u", "database", "d"), nil)
	if got := types(t, out); got != "RSKZ" || !r.Setup {
		t.Fatalf("start-up answered %q", got)
	}
	if !bytes.Contains(out, []byte("15.8")) {
		t.Errorf("recorded server_version not reported: %q", out)
	}
	if r, out := answer(t, a, b, msg('Q', "-- ping\x00"), nil); types(t, out) != "IZ" || !r.Setup {
		t.Errorf("ping answered %q", out)
	}
}

// TestAnswererSSLAsRecorded: an SSLRequest is answered as the recorded
// server answered the destination's: 'S' if it accepted any, 'N' if it
// refused them all; a GSSENCRequest always 'N'.
func TestAnswererSSLAsRecorded(t *testing.T) {
	p := postgres.Protocol
	for _, c := range []struct {
		recorded string
		want     string
	}{{"", "S"}, {"N", "N"}, {"NN", "N"}, {"S", "S"}, {"NS", "S"}} {
		b := p.NewBook()
		for _, ans := range c.recorded {
			b.Learn(wire.Call{Request: request(postgres.SSLRequestCode), Response: []byte{byte(ans)}, Setup: true})
		}
		a := p.NewAnswerer(wire.Env{Book: b, ConnID: 1})
		if _, out := answer(t, a, b, request(postgres.SSLRequestCode), nil); string(out) != c.want {
			t.Errorf("recorded %q: SSLRequest answered %q, want %q", c.recorded, out, c.want)
		}
		a = p.NewAnswerer(wire.Env{Book: b, ConnID: 2})
		if _, out := answer(t, a, b, request(postgres.GSSENCRequestCode), nil); string(out) != "N" {
			t.Errorf("recorded %q: GSSENCRequest answered %q, want N", c.recorded, out)
		}
		// the recorded SSLRequest did not take the place of the start-up's
		// parameters
		if _, out := answer(t, a, b, startup("user", "u"), nil); !bytes.Contains(out, []byte("retrace mock")) {
			t.Errorf("recorded %q: start-up does not report the default parameters: %q", c.recorded, out)
		}
	}
}

func TestAnswererPreparesFromAnyRecording(t *testing.T) {
	p := postgres.Protocol
	b := p.NewBook()
	b.Learn(prepareCall("stmtcache_1"))
	a := p.NewAnswerer(wire.Env{Book: b})
	answer(t, a, b, startup("user", "u"), nil)
	// prepared under another name on the live connection
	live := enc(&pgproto3.Parse{Name: "lib_pq_3", Query: selectSQL}, &pgproto3.Describe{ObjectType: 'S', Name: "lib_pq_3"}, &pgproto3.Sync{})
	r, out := answer(t, a, b, live, nil)
	if !r.Prepare || types(t, out) != "1tTZ" {
		t.Fatalf("prepare answered %q (%+v)", types(t, out), r)
	}
	// in a transaction, the prepare's ReadyForQuery says so
	answer(t, a, b, msg('Q', "begin\x00"), enc(&pgproto3.CommandComplete{CommandTag: []byte("BEGIN")}, &pgproto3.ReadyForQuery{TxStatus: 'T'}))
	if _, out := answer(t, a, b, live, nil); out[len(out)-1] != 'T' {
		t.Fatalf("prepare in a transaction answered %q", out)
	}
	// a statement no recording described is a missing mock
	unknown := enc(&pgproto3.Parse{Name: "x", Query: "select 2"}, &pgproto3.Describe{ObjectType: 'S', Name: "x"}, &pgproto3.Sync{})
	if r, out := answer(t, a, b, unknown, nil); r.Op != "PREPARE select ?" || types(t, out) != "EZ" {
		t.Fatalf("unknown prepare: %+v answered %q", r, out)
	}
	// the live Bind names the live statement; it is matched by its SQL
	bind := execCall("lib_pq_3", 1, "").Request
	if r, _, _, _ := a.Next(bind); r.Op != "EXECUTE "+selectSQL {
		t.Fatalf("bind of the live name: %+v", r)
	}
}

func TestAnswererMissing(t *testing.T) {
	p := postgres.Protocol
	b := p.NewBook()
	a := p.NewAnswerer(wire.Env{Book: b})
	answer(t, a, b, startup("user", "u"), nil)
	// in a transaction: a missing mock fails it, as any error would
	answer(t, a, b, msg('Q', "begin\x00"), enc(&pgproto3.CommandComplete{CommandTag: []byte("BEGIN")}, &pgproto3.ReadyForQuery{TxStatus: 'T'}))
	_, out := answer(t, a, b, execCall("s", 1, "").Request, nil)
	if types(t, out) != "EZ" || out[len(out)-1] != 'E' {
		t.Fatalf("missing mock answered %q", out)
	}
	var e pgproto3.ErrorResponse
	m, _, _ := postgres.Next(out, false, false, 0)
	if err := e.Decode(m.Body); err != nil || e.Code != "XX000" || !strings.Contains(e.Message, "retrace: no recorded answer") {
		t.Fatalf("error %+v %v", e, err)
	}
	// after a Flush the error is all; the server then skips to Sync
	flushed := enc(&pgproto3.Bind{PreparedStatement: "s"}, &pgproto3.Execute{}, &pgproto3.Flush{})
	if _, out := answer(t, a, b, flushed, nil); types(t, out) != "E" {
		t.Fatalf("missing mock before Flush answered %q", types(t, out))
	}
	rest := enc(&pgproto3.Bind{PreparedStatement: "s"}, &pgproto3.Execute{}, &pgproto3.Sync{})
	if r, out := answer(t, a, b, rest, nil); types(t, out) != "Z" || !r.Local {
		t.Fatalf("messages up to Sync answered %q", types(t, out))
	}
}

func TestAnswererCancelAndTerminate(t *testing.T) {
	p := postgres.Protocol
	b := p.NewBook()
	a := p.NewAnswerer(wire.Env{Book: b})
	r, out := answer(t, a, b, request(postgres.CancelRequestCode, 0, 0, 0, 1, 0, 0, 0, 2), nil)
	if !r.Quit || !r.NoReply || out != nil {
		t.Fatalf("cancel: %+v %q", r, out)
	}
	a = p.NewAnswerer(wire.Env{Book: b})
	answer(t, a, b, startup("user", "u"), nil)
	if r, out := answer(t, a, b, msg('X', ""), nil); !r.Quit || out != nil {
		t.Fatalf("terminate: %+v %q", r, out)
	}
}

func TestAnswererPartialAndLimit(t *testing.T) {
	p := postgres.Protocol
	b := p.NewBook()
	a := p.NewAnswerer(wire.Env{Book: b, MaxMessage: 64})
	st := startup("user", "u")
	if _, n, _, err := a.Next(st[:5]); n != 0 || err != nil {
		t.Fatalf("partial start-up: %d %v", n, err)
	}
	answer(t, a, b, st, nil)
	// a unit is whole only with its Sync
	req := execCall("s", 1, "").Request
	if _, n, _, err := a.Next(req[:len(req)-5]); n != 0 || err != nil {
		t.Fatalf("unit without its Sync: %d %v", n, err)
	}
	if _, _, _, err := a.Next(msg('Q', strings.Repeat("x", 100))); err == nil {
		t.Fatal("no error for a message over the limit")
	}
}

func TestDecode(t *testing.T) {
	p := postgres.Protocol
	req := enc(&pgproto3.Parse{Query: "insert into t values ($1, $2, $3)", ParameterOIDs: []uint32{20, 25, 3802}},
		&pgproto3.Bind{ParameterFormatCodes: []int16{1, 0, 1}, Parameters: [][]byte{binary.BigEndian.AppendUint64(nil, 42), []byte("ann"), append([]byte{1}, `{"a":1}`...)}},
		&pgproto3.Execute{}, &pgproto3.Sync{})
	d, ok := p.Decode(wire.Client, req)
	if !ok {
		t.Fatal("not decoded")
	}
	want := map[string]string{"sql": "insert into t values ($1, $2, $3)", "params[0]": "42", "params[1]": `"ann"`, "params[2]": `"{\"a\":1}"`}
	for _, f := range d.Fields {
		if w, ok := want[f.Path]; ok && w != f.Value {
			t.Errorf("%s = %s, want %s", f.Path, f.Value, w)
		}
		delete(want, f.Path)
	}
	if len(want) > 0 {
		t.Errorf("fields missing: %v (decoded %+v)", want, d)
	}
	ans := execCall("s", 1, "ann").Response
	d, ok = p.Decode(wire.Server, ans)
	if !ok || !strings.Contains(d.Text, `row "ann"`) || d.Fields[0].Path != "rows[0].name" {
		t.Fatalf("answer decoded %+v", d)
	}
	if _, ok := p.Decode(wire.Client, []byte{'Q', 0, 0}); ok {
		t.Error("a partial message decoded")
	}
}

func TestFormatValue(t *testing.T) {
	be := binary.BigEndian
	u32 := func(v uint32) []byte { return be.AppendUint32(nil, v) }
	u64 := func(v uint64) []byte { return be.AppendUint64(nil, v) }
	numeric := func(ndig, weight, sign, scale uint16, digits ...uint16) []byte {
		b := be.AppendUint16(be.AppendUint16(be.AppendUint16(be.AppendUint16(nil, ndig), weight), sign), scale)
		for _, d := range digits {
			b = be.AppendUint16(b, d)
		}
		return b
	}
	array := func(elem uint32, vals ...[]byte) []byte {
		b := append(append(append(u32(1), u32(0)...), u32(elem)...), append(u32(uint32(len(vals))), u32(1)...)...)
		for _, v := range vals {
			if v == nil {
				b = append(b, 0xff, 0xff, 0xff, 0xff)
				continue
			}
			b = append(append(b, u32(uint32(len(v)))...), v...)
		}
		return b
	}
	cases := []struct {
		name   string
		oid    uint32
		format int16
		v      []byte
		want   string
	}{
		{"null", 23, 1, nil, "NULL"},
		{"int2", 21, 1, []byte{0xff, 0xfe}, "-2"},
		{"int4", 23, 1, u32(42), "42"},
		{"int8", 20, 1, u64(1 << 40), "1099511627776"},
		{"float8", 701, 1, u64(0x3ff8000000000000), "1.5"},
		{"bool", 16, 1, []byte{1}, "true"},
		{"text", 25, 1, []byte("a\"b"), `"a\"b"`},
		{"bytea", 17, 1, []byte{0xde, 0xad}, `\xdead`},
		{"uuid", 2950, 1, []byte{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0, 1, 2, 3, 4, 5, 6, 7}, "12345678-9abc-def0-0001-020304050607"},
		{"jsonb", 3802, 1, append([]byte{1}, `{"k":true}`...), `"{\"k\":true}"`},
		{"date", 1082, 1, u32(9466), "2025-12-01"},
		{"timestamp", 1114, 1, u64(817_815_323_123_456), "2025-11-30 10:55:23.123456"},
		{"timestamptz", 1184, 1, u64(817_815_323_000_000), "2025-11-30 10:55:23Z"},
		{"numeric 12.25", 1700, 1, numeric(2, 0, 0, 2, 12, 2500), "12.25"},
		{"numeric -0.0003", 1700, 1, numeric(1, 0xffff, 0x4000, 4, 3), "-0.0003"},
		{"numeric 20000", 1700, 1, numeric(1, 1, 0, 0, 2), "20000"},
		{"numeric NaN", 1700, 1, numeric(0, 0, 0xC000, 0), "NaN"},
		{"int4[]", 1007, 1, array(23, u32(1), nil, u32(3)), "{1,NULL,3}"},
		{"text[]", 1009, 1, array(25, []byte("a"), []byte("b")), `{"a","b"}`},
		{"unknown binary", 9999, 1, []byte{1, 2}, `\x0102 (2 bytes)`},
		{"text format int", 23, 0, []byte("42"), "42"},
		{"text format text", 25, 0, []byte("x"), `"x"`},
		{"bad int4", 23, 1, []byte{1}, `\x01 (1 bytes)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := postgres.FormatValue(tc.oid, tc.format, tc.v); got != tc.want {
				t.Errorf("FormatValue(%d, %d, %x) = %s, want %s", tc.oid, tc.format, tc.v, got, tc.want)
			}
		})
	}
}

// TestTapFollowsAnswers: the tap attributes answers by the protocol, and
// says when the requests written have had all their answers.
func TestTapFollowsAnswers(t *testing.T) {
	tp := postgres.Protocol.NewTap()
	if tp.ReadsOnWriter() {
		t.Fatal("PostgreSQL answers are attributed by the protocol")
	}
	if f := tp.Write(request(postgres.SSLRequestCode), "t1", true); !f.Setup {
		t.Fatal("SSLRequest not set-up")
	}
	tp.Read([]byte("N"))
	tp.Write(startup("user", "u"), "t1", true)
	auth := enc(&pgproto3.AuthenticationOk{}, &pgproto3.ParameterStatus{Name: "a", Value: "b"}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	for i := range auth {
		if !tp.Read(auth[i : i+1]) {
			t.Fatalf("start-up answer byte %d not attributed", i)
		}
	}
	if tp.Read(enc(&pgproto3.NotificationResponse{Channel: "c"})) {
		t.Fatal("a notification between requests attributed to the last call")
	}
	if f := tp.Write(enc(&pgproto3.Query{String: "select 1"}, &pgproto3.Query{String: "select 2"}), "t2", true); f.Setup || f.Trace != "t2" {
		t.Fatalf("filing %+v", f)
	}
	one := enc(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	if !tp.Read(one[:3]) || !tp.Read(one[3:]) || !tp.Read(one) {
		t.Fatal("the answers owed to two queries not attributed")
	}
	if tp.Read(one) {
		t.Fatal("an answer beyond those owed attributed")
	}
}

// TestAnswererHoldsCancelledAnswer: a recorded answer that is
// query_canceled waits for a CancelRequest with the backend key the
// answerer gave its connection (what precedes the error goes at once); a
// cancel with the wrong secret, or of another connection, releases
// nothing; an answer that is not query_canceled does not wait.
func TestAnswererHoldsCancelledAnswer(t *testing.T) {
	p := postgres.Protocol
	b := p.NewBook()
	a := p.NewAnswerer(wire.Env{Book: b, ConnID: 4242})
	_, out := answer(t, a, b, startup("user", "u"), nil)
	var key pgproto3.BackendKeyData
	postgres.Messages(out, false, false, func(m postgres.Message) bool {
		if m.Type == 'K' {
			key.Decode(m.Body)
		}
		return true
	})
	head := enc(&pgproto3.BindComplete{}, &pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("x"), DataTypeOID: 25}}})
	cancelled := append(append([]byte(nil), head...), enc(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "57014", Message: "canceling statement due to user request"}, &pgproto3.ReadyForQuery{TxStatus: 'I'})...)
	c := a.(wire.Canceller)
	answer(t, a, b, execCall("", 1, "").Request, enc(&pgproto3.BindComplete{}, &pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, &pgproto3.ReadyForQuery{TxStatus: 'I'}))
	if _, _, _, ok := c.AwaitCancel(); ok {
		t.Fatal("an answer that is not query_canceled waits for a cancel")
	}
	answer(t, a, b, execCall("", 1, "").Request, cancelled)
	ch, n, done, ok := c.AwaitCancel()
	if !ok || n != len(head) {
		t.Fatalf("query_canceled answer: wait %v, head %d bytes, want %d", ok, n, len(head))
	}
	defer done()
	cancelReq := func(pid uint32, secret []byte) []byte {
		body := binary.BigEndian.AppendUint32(nil, pid)
		return request(postgres.CancelRequestCode, append(body, secret...)...)
	}
	other := p.NewAnswerer(wire.Env{Book: b, ConnID: 4243})
	answer(t, other, b, cancelReq(key.ProcessID, []byte{1, 2, 3, 4}), nil)
	answer(t, p.NewAnswerer(wire.Env{Book: b, ConnID: 4244}), b, cancelReq(key.ProcessID+1, key.SecretKey), nil)
	select {
	case <-ch:
		t.Fatal("released by a cancel with another backend key")
	default:
	}
	answer(t, p.NewAnswerer(wire.Env{Book: b, ConnID: 4245}), b, cancelReq(key.ProcessID, key.SecretKey), nil)
	select {
	case <-ch:
	default:
		t.Fatal("the cancel with the connection's backend key did not release its answer")
	}
}

// TestCancelBeforeTheAnswer: a cancel that reaches the mock server before
// it got to the query (a busy mock) releases that query's answer at once.
func TestCancelBeforeTheAnswer(t *testing.T) {
	p := postgres.Protocol
	b := p.NewBook()
	a := p.NewAnswerer(wire.Env{Book: b, ConnID: 5151})
	_, out := answer(t, a, b, startup("user", "u"), nil)
	var key pgproto3.BackendKeyData
	postgres.Messages(out, false, false, func(m postgres.Message) bool {
		if m.Type == 'K' {
			key.Decode(m.Body)
		}
		return true
	})
	body := append(binary.BigEndian.AppendUint32(nil, key.ProcessID), key.SecretKey...)
	answer(t, p.NewAnswerer(wire.Env{Book: b, ConnID: 5152}), b, request(postgres.CancelRequestCode, body...), nil)
	answer(t, a, b, execCall("", 1, "").Request, enc(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "57014"}, &pgproto3.ReadyForQuery{TxStatus: 'I'}))
	ch, n, done, ok := a.(wire.Canceller).AwaitCancel()
	if !ok || n != 0 {
		t.Fatalf("query_canceled answer: wait %v, head %d", ok, n)
	}
	defer done()
	select {
	case <-ch:
	default:
		t.Fatal("the cancel that came first did not release the answer")
	}
}

package regress

import (
	"fmt"
	"testing"

	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/replayer/diff"
)

func resp(args ...string) string {
	s := fmt.Sprintf("*%d\r\n", len(args))
	for _, a := range args {
		s += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
	}
	return s
}

func TestDownstreamFindings(t *testing.T) {
	const redis, stock = "10.0.0.7:6379", "stock:80"
	sess := &recording.Session{ID: "s", Calls: []recording.Call{
		{Seq: 0, Proto: "redis", Dst: redis, Setup: true, Request: []byte(resp("HELLO", "3"))},
		{Seq: 1, Proto: "redis", Dst: redis, Request: []byte(resp("GET", "a") + resp("GET", "b"))}, // a pipeline
		{Seq: 2, Proto: "http", Dst: stock, Request: []byte("GET /stock?sku=a HTTP/1.1\r\nHost: stock\r\n\r\n")},
		{Seq: 3, Proto: "redis", Dst: redis, Request: []byte(resp("DEL", "a"))},
	}}
	obs := func(seq, matched int, proto, dst, req string) mockserver.ObservedCall {
		return mockserver.ObservedCall{Seq: seq, Matched: matched, Proto: proto, Dst: dst, Request: []byte(req)}
	}
	cases := []struct {
		name   string
		calls  []mockserver.ObservedCall
		unused []recording.Call
		rules  []diff.Rule
		want   string
	}{
		{"pipeline answered command by command", []mockserver.ObservedCall{
			{Seq: 0, Matched: 0, Proto: "redis", Dst: redis, Setup: true, Request: []byte(resp("HELLO", "3"))},
			obs(1, 1, "redis", redis, resp("GET", "a")),
			obs(2, 2, "http", stock, "GET /stock?sku=a HTTP/1.1\r\nHost: stock\r\n\r\n"),
			obs(3, 1, "redis", redis, resp("GET", "b")),
			obs(4, 3, "redis", redis, resp("DEL", "a")),
		}, nil, nil, "[]"},
		{"one command of the pipeline changed", []mockserver.ObservedCall{
			obs(0, 1, "redis", redis, resp("GET", "a")),
			obs(1, 1, "redis", redis, resp("GET", "c")),
		}, []recording.Call{sess.Calls[2], sess.Calls[3]}, nil,
			"[downstream #0 redis 10.0.0.7:6379: cmd[1].args[1] changed b→c downstream recorded #2 http stock:80: call removed GET /stock?sku=a HTTP/1.1→ downstream recorded #3 redis 10.0.0.7:6379: call removed DEL a→]"},
		{"call without recording", []mockserver.ObservedCall{
			obs(0, -1, "http", "metrics:9000", "POST /m HTTP/1.1\r\nHost: metrics\r\n\r\n"),
		}, nil, nil, "[downstream #0 http metrics:9000: call added →POST /m HTTP/1.1]"},
		{"proxied call", []mockserver.ObservedCall{
			{Seq: 0, Matched: -1, Proto: "http", Dst: "shadow:80", Proxied: true, Request: []byte("GET / HTTP/1.1\r\nHost: shadow\r\n\r\n")},
		}, nil, nil, "[]"},
		{"call without recording ignored by rule", []mockserver.ObservedCall{
			obs(0, -1, "http", "metrics:9000", "POST /m HTTP/1.1\r\nHost: metrics\r\n\r\n"),
		}, nil, []diff.Rule{{Ignore: "call", Scope: diff.ScopeDownstream, Dst: "metrics:*"}}, "[]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rules, err := diff.NewRules(tc.rules...)
			if err != nil {
				t.Fatal(err)
			}
			fs, calls := downstream(rules, nil, "GET /x", sess, &mockserver.TraceReport{Calls: tc.calls, Unused: tc.unused})
			var got []string
			for _, f := range fs {
				got = append(got, fmt.Sprintf("%s %s %s→%s", f.Label(), f.Kind, f.Want, f.Got))
			}
			if fmt.Sprint(got) != tc.want && !(len(got) == 0 && tc.want == "[]") {
				t.Errorf("findings\n%v\nwant\n%s", got, tc.want)
			}
			for _, c := range calls {
				if c.Seq >= 0 && c.Recorded != nil && c.Matched == 1 && string(c.Replayed) != string(c.Recorded) && len(c.Diffs) == 0 {
					t.Errorf("call detail of the pipeline does not hold the joined request: %q", c.Replayed)
				}
			}
		})
	}
}

func TestClassify(t *testing.T) {
	f := func(path, got string) Finding {
		return Finding{Difference: diff.Difference{Path: path, Kind: diff.Changed, Got: got}, Where: InResponse}
	}
	cand := []Finding{f("body.a", "1"), f("body.b", "2"), f("body.c", "3")}
	base := []Finding{f("body.a", "1"), f("body.b", "9"), f("body.d", "4")}
	reg, pre := classify(cand, base)
	if len(reg) != 2 || reg[0].Path != "body.b" || reg[1].Path != "body.c" || len(pre) != 1 || pre[0].Path != "body.a" {
		t.Errorf("regressions %v, pre-existing %v", reg, pre)
	}
}

func mysqlPkt(cmd byte, payload string) string {
	n := len(payload) + 1
	return string([]byte{byte(n), byte(n >> 8), byte(n >> 16), 0, cmd}) + payload
}

func stmt(id byte) string { return string([]byte{id, 0, 0, 0}) }

// execOne renders COM_STMT_EXECUTE of statement id with one string value.
func execOne(id byte, v string) string {
	return mysqlPkt(0x17, stmt(id)+"\x00\x01\x00\x00\x00"+"\x00\x01"+"\xfe\x00"+string([]byte{byte(len(v))})+v)
}

func prepareOK(id byte) []byte {
	return []byte(mysqlPkt(0x00, stmt(id)+"\x01\x00\x01\x00\x00"))
}

func TestMySQLComparedByCommand(t *testing.T) {
	const db = "10.0.0.8:3306"
	sess := &recording.Session{ID: "s", Calls: []recording.Call{
		{Seq: 0, Proto: "mysql", Dst: db, Request: []byte(mysqlPkt(0x16, "SELECT a FROM t WHERE id = ?")), Response: prepareOK(5)},
		{Seq: 1, Proto: "mysql", Dst: db, Request: []byte(execOne(5, "k1"))},
		{Seq: 2, Proto: "mysql", Dst: db, Request: []byte(mysqlPkt(0x19, stmt(5)) + mysqlPkt(0x16, "INSERT INTO o VALUES (?)")), Response: prepareOK(6)},
		{Seq: 3, Proto: "mysql", Dst: db, Request: []byte(execOne(6, "v1"))},
		{Seq: 4, Proto: "mysql", Dst: db, Request: []byte(mysqlPkt(0x19, stmt(6)))},
	}}
	obs := func(seq, matched int, req string) mockserver.ObservedCall {
		return mockserver.ObservedCall{Seq: seq, Matched: matched, Proto: "mysql", Dst: db, Request: []byte(req)}
	}
	cases := []struct {
		name  string
		calls []mockserver.ObservedCall
		want  string
	}{
		{"grouped differently", []mockserver.ObservedCall{
			obs(0, 0, mysqlPkt(0x16, "SELECT a FROM t WHERE id = ?")),
			obs(1, 1, execOne(5, "k1")),
			obs(2, 4, mysqlPkt(0x19, stmt(5))),                     // the close alone …
			obs(3, 2, mysqlPkt(0x16, "INSERT  INTO o VALUES (?)")), // … and the prepare alone
			obs(4, 3, execOne(6, "v1")),
		}, "[]"},
		{"changed value and statement", []mockserver.ObservedCall{
			obs(0, 0, mysqlPkt(0x16, "SELECT a FROM t WHERE id = ?")),
			obs(1, 1, execOne(5, "k2")),
			obs(2, 2, mysqlPkt(0x16, "INSERT INTO o VALUES (?, ?)")),
		}, `[downstream #1 mysql 10.0.0.8:3306: params[0] changed "k1"→"k2" downstream #2 mysql 10.0.0.8:3306: sql changed INSERT INTO o VALUES (?)→INSERT INTO o VALUES (?, ?) downstream recorded #3 mysql 10.0.0.8:3306: call removed execute INSERT INTO o VALUES (?)→]`},
		{"prepare without partner", []mockserver.ObservedCall{
			obs(0, 0, mysqlPkt(0x16, "SELECT a FROM t WHERE id = ?")),
			obs(1, 0, mysqlPkt(0x16, "SELECT a FROM t WHERE id = ?")),
			obs(2, 1, execOne(5, "k1")),
			obs(3, 2, mysqlPkt(0x16, "INSERT INTO o VALUES (?)")),
			obs(4, 3, execOne(6, "v1")),
		}, "[]"},
		{"set-up labels differ", []mockserver.ObservedCall{
			{Seq: 0, Matched: 0, Proto: "mysql", Dst: db, Setup: true, Request: []byte(mysqlPkt(0x16, "SELECT a FROM t WHERE id = ?"))},
			obs(1, 1, execOne(5, "k1")),
			obs(2, 2, mysqlPkt(0x16, "INSERT INTO o VALUES (?)")),
			obs(3, 3, execOne(6, "v1")),
			{Seq: 4, Matched: -1, Proto: "mysql", Dst: db, Setup: true, Request: []byte(mysqlPkt(0x03, "SET NAMES utf8mb4"))},
		}, "[]"},
		{"extra query", []mockserver.ObservedCall{
			obs(0, 0, mysqlPkt(0x16, "SELECT a FROM t WHERE id = ?")),
			obs(1, 1, execOne(5, "k1")),
			obs(2, 2, mysqlPkt(0x16, "INSERT INTO o VALUES (?)")),
			obs(3, 3, execOne(6, "v1")),
			obs(4, -1, mysqlPkt(0x03, "DELETE FROM o")),
		}, "[downstream #4 mysql 10.0.0.8:3306: call added →DELETE FROM o]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs, _ := downstream(nil, nil, "POST /o", sess, &mockserver.TraceReport{Calls: tc.calls})
			var got []string
			for _, f := range fs {
				got = append(got, fmt.Sprintf("%s %s %s→%s", f.Label(), f.Kind, f.Want, f.Got))
			}
			if fmt.Sprint(got) != tc.want && !(len(got) == 0 && tc.want == "[]") {
				t.Errorf("findings\n%v\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestNoisePath(t *testing.T) {
	for in, want := range map[string]string{
		"body.items[3].ts":    "body.items[*].ts",
		"body[0]":             "body[*]",
		"params[9]":           "params[9]",
		"cmd[1].args[2]":      "cmd[1].args[2]",
		"header.X-Request-Id": "header.X-Request-Id",
		"bodyx[1]":            "bodyx[1]",
	} {
		if got := noisePath(in); got != want {
			t.Errorf("noisePath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMySQLStatementsKnownByTheirMatch(t *testing.T) {
	const db = "10.0.0.8:3306"
	sess := &recording.Session{ID: "s", Calls: []recording.Call{
		{Seq: 0, Proto: "mysql", Dst: db, Request: []byte(mysqlPkt(0x16, "SELECT a FROM users WHERE id = ?")), Response: prepareOK(5)},
		{Seq: 1, Proto: "mysql", Dst: db, Request: []byte(mysqlPkt(0x16, "SELECT cents FROM rates WHERE c = ?")), Response: prepareOK(6)},
		{Seq: 2, Proto: "mysql", Dst: db, Request: []byte(execOne(5, "3"))},
		{Seq: 3, Proto: "mysql", Dst: db, Request: []byte(execOne(6, "IT"))},
	}}
	obs := func(seq, matched int, req string) mockserver.ObservedCall {
		return mockserver.ObservedCall{Seq: seq, Matched: matched, Proto: "mysql", Dst: db, Request: []byte(req)}
	}
	// The mock numbered the statements 1 and 2 and the executes arrived in
	// the other order: each is still compared with its own statement's.
	fs, _ := downstream(nil, nil, "POST /o", sess, &mockserver.TraceReport{Calls: []mockserver.ObservedCall{
		obs(0, 1, mysqlPkt(0x16, "SELECT cents FROM rates WHERE c = ?")),
		obs(1, 0, mysqlPkt(0x16, "SELECT a FROM users WHERE id = ?")),
		obs(2, 3, execOne(1, "IT")),
		obs(3, 2, execOne(2, "4")),
	}})
	var got []string
	for _, f := range fs {
		got = append(got, fmt.Sprintf("%s %s %s→%s", f.Label(), f.Kind, f.Want, f.Got))
	}
	if want := `[downstream #3 mysql 10.0.0.8:3306: params[0] changed "3"→"4"]`; fmt.Sprint(got) != want {
		t.Errorf("findings\n%v\nwant\n%s", got, want)
	}
}

// TestMySQLAbandonedStatement: the recorded request was cancelled between
// a prepare's answer and its execute (an errgroup sibling failed), so the
// recording holds the prepare and no execute; a replay that gets to the
// execute first is not a change. An execute of a statement the recording
// never prepared still is.
func TestMySQLAbandonedStatement(t *testing.T) {
	const db = "10.0.0.8:3306"
	const sel, ins = "SELECT a FROM t WHERE id = ?", "INSERT INTO o VALUES (?)"
	sess := &recording.Session{ID: "s", Calls: []recording.Call{
		{Seq: 0, Proto: "mysql", Dst: db, Request: []byte(mysqlPkt(0x16, sel)), Response: prepareOK(5)},
		{Seq: 1, Proto: "mysql", Dst: db, Request: []byte(execOne(5, "k1"))},
		{Seq: 2, Proto: "mysql", Dst: db, Request: []byte(mysqlPkt(0x16, ins)), Response: prepareOK(6)},
		{Seq: 3, Proto: "mysql", Dst: db, Request: []byte(mysqlPkt(0x19, stmt(6)))},
	}}
	obs := func(seq, matched int, req, statement string) mockserver.ObservedCall {
		return mockserver.ObservedCall{Seq: seq, Matched: matched, Proto: "mysql", Dst: db, Request: []byte(req), Statement: statement}
	}
	findings := func(calls ...mockserver.ObservedCall) string {
		fs, _ := downstream(nil, nil, "POST /o", sess, &mockserver.TraceReport{Calls: calls})
		var got []string
		for _, f := range fs {
			got = append(got, fmt.Sprintf("%s %s %s→%s", f.Label(), f.Kind, f.Want, f.Got))
		}
		return fmt.Sprint(got)
	}
	// the mock server numbers statements its own way (1 and 2)
	if got := findings(
		obs(0, 0, mysqlPkt(0x16, sel), ""),
		obs(1, 1, execOne(1, "k1"), sel),
		obs(2, 2, mysqlPkt(0x16, ins), ""),
		obs(3, -1, execOne(2, "v1"), ins), // no recorded answer: the recording never got there
		obs(4, 3, mysqlPkt(0x19, stmt(2)), ins),
	); got != "[]" {
		t.Errorf("execute of the abandoned statement reported: %s", got)
	}
	if got, want := findings(
		obs(0, 0, mysqlPkt(0x16, sel), ""),
		obs(1, 1, execOne(1, "k1"), sel),
		obs(2, -1, execOne(1, "k1"), sel), // executed twice, recorded once
		obs(3, 2, mysqlPkt(0x16, ins), ""),
		obs(4, 3, mysqlPkt(0x19, stmt(2)), ins),
	), `[downstream #2 mysql 10.0.0.8:3306: call added →execute SELECT a FROM t WHERE id = ?]`; got != want {
		t.Errorf("findings\n%s\nwant\n%s", got, want)
	}
}

// TestMatchedSeqOfAnotherDestination: an observed call can only join the
// recorded calls of its own destination. A MySQL prepare answered from
// another recording (its statement prepared once more after a retry)
// carries that recording's seq, here the seq of this session's Redis call;
// it must neither be joined to that call's bytes nor compared with it.
func TestMatchedSeqOfAnotherDestination(t *testing.T) {
	const db, rd = "10.0.0.8:3306", "10.0.0.7:6379"
	get := "*2\r\n$3\r\nget\r\n$1\r\nk\r\n"
	sess := &recording.Session{ID: "s", Calls: []recording.Call{
		{Seq: 0, Proto: "redis", Dst: rd, Request: []byte(get), Response: []byte("$1\r\nv\r\n")},
	}}
	prepare := mysqlPkt(0x16, "SELECT a FROM users WHERE id = ?")
	for _, setup := range []bool{false, true} { // as the mock server reported it before and after
		fs, _ := downstream(nil, nil, "GET /x", sess, &mockserver.TraceReport{Calls: []mockserver.ObservedCall{
			{Seq: 0, Matched: 0, Proto: "mysql", Dst: db, Setup: setup, Request: []byte(prepare)},
			{Seq: 1, Matched: 0, Proto: "redis", Dst: rd, Request: []byte(get)},
		}})
		for _, f := range fs {
			if f.Call != nil && f.Call.Proto == "redis" {
				t.Errorf("setup=%v: the Redis call differs: %s %s %q→%q", setup, f.Label(), f.Kind, f.Want, f.Got)
			}
		}
	}
}

package diff

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"github.com/retrace-dev/retrace/wire/http1"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func resp(status int, headers, body string) []byte {
	return []byte(fmt.Sprintf("HTTP/1.1 %d X\r\n%sContent-Length: %d\r\n\r\n%s", status, headers, len(body), body))
}

func gz(s string) string {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	return b.String()
}

func chunked(s string) []byte {
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
	for len(s) > 0 {
		n := min(3, len(s))
		fmt.Fprintf(&b, "%x\r\n%s\r\n", n, s[:n])
		s = s[n:]
	}
	b.WriteString("0\r\n\r\n")
	return b.Bytes()
}

func paths(ds []Difference) string {
	var p []string
	for _, d := range ds {
		p = append(p, d.Path+" "+string(d.Kind))
	}
	return strings.Join(p, ", ")
}

func mustRules(t *testing.T, rules ...Rule) *Rules {
	t.Helper()
	r, err := NewRules(rules...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestCompareResponses(t *testing.T) {
	const ct = "Content-Type: application/json\r\n"
	cases := []struct {
		name      string
		rules     []Rule
		want, got []byte
		diffs     string
	}{
		{"equal", nil, resp(200, ct, `{"a":1}`), resp(200, ct, `{"a":1}`), ""},
		{"status", nil, resp(200, ct, `{}`), resp(500, ct, `{}`), "status changed"},
		{"date header ignored by default", nil, resp(200, "Date: Mon\r\n", "x"), resp(200, "Date: Tue\r\n", "x"), ""},
		{"header changed", nil, resp(200, "X-V: 1\r\n", "x"), resp(200, "X-V: 2\r\n", "x"), "header.X-V changed"},
		{"header added and removed", nil, resp(200, "X-A: 1\r\n", "x"), resp(200, "X-B: 1\r\n", "x"),
			"header.X-A removed, header.X-B added"},
		{"header ignored by rule", []Rule{{IgnoreHeader: "x-*"}}, resp(200, "X-A: 1\r\n", "x"), resp(200, "X-B: 1\r\n", "x"), ""},
		{"json field", nil, resp(200, ct, `{"items":[{"price":1},{"price":2},{"price":3},{"price":4}]}`),
			resp(200, ct, `{"items":[{"price":1},{"price":2},{"price":3},{"price":5}]}`), "body.items[3].price changed"},
		{"json key order and spacing do not matter", nil, resp(200, ct, `{"a":1,"b":[1,2]}`), resp(200, ct, "{ \"b\": [1, 2],\n \"a\": 1.0 }"), ""},
		{"json added and removed", nil, resp(200, ct, `{"a":1,"b":2}`), resp(200, ct, `{"a":1,"c":2}`), "body.b removed, body.c added"},
		{"json type change", nil, resp(200, ct, `{"a":1}`), resp(200, ct, `{"a":"1"}`), "body.a changed"},
		{"json array length", nil, resp(200, ct, `[1,2,3]`), resp(200, ct, `[1,2]`), "body[2] removed"},
		{"odd keys are quoted", nil, resp(200, ct, `{"a.b":1}`), resp(200, ct, `{"a.b":2}`), `body["a.b"] changed`},
		{"ignore with index wildcard", []Rule{{Ignore: "body.items[*].ts"}},
			resp(200, ct, `{"items":[{"ts":1,"n":1},{"ts":2,"n":2}]}`), resp(200, ct, `{"items":[{"ts":3,"n":1},{"ts":4,"n":3}]}`),
			"body.items[1].n changed"},
		{"ignore any depth", []Rule{{Ignore: "**.id"}},
			resp(200, ct, `{"id":1,"o":{"id":2,"x":[{"id":3}]}}`), resp(200, ct, `{"id":9,"o":{"id":8,"x":[{"id":7}]}}`), ""},
		{"ignore by api only on that api", []Rule{{Ignore: "body.ts", API: "GET /other*"}},
			resp(200, ct, `{"ts":1}`), resp(200, ct, `{"ts":2}`), "body.ts changed"},
		{"ignore in downstream scope only", []Rule{{Ignore: "body.ts", Scope: ScopeDownstream}},
			resp(200, ct, `{"ts":1}`), resp(200, ct, `{"ts":2}`), "body.ts changed"},
		{"unordered", []Rule{{Unordered: "body.tags"}},
			resp(200, ct, `{"tags":["a","b","c"]}`), resp(200, ct, `{"tags":["c","a","b"]}`), ""},
		{"unordered with difference", []Rule{{Unordered: "body.tags"}},
			resp(200, ct, `{"tags":["a","b","c"]}`), resp(200, ct, `{"tags":["c","a","x"]}`), "body.tags[1] changed"},
		{"unordered objects ignoring a field", []Rule{{Unordered: "body[*].l"}, {Ignore: "**.ts"}},
			resp(200, ct, `[{"l":[{"k":1,"ts":1},{"k":2,"ts":2}]}]`), resp(200, ct, `[{"l":[{"k":2,"ts":5},{"k":1,"ts":6}]}]`), ""},
		{"unordered by key", []Rule{{Unordered: "body.items", Key: "sku"}},
			resp(200, ct, `{"items":[{"sku":"a","q":1},{"sku":"b","q":2}]}`), resp(200, ct, `{"items":[{"sku":"b","q":3},{"sku":"a","q":1}]}`),
			"body.items[1].q changed"},
		{"unordered by key missing element", []Rule{{Unordered: "body.items", Key: "sku"}},
			resp(200, ct, `{"items":[{"sku":"a"},{"sku":"b"}]}`), resp(200, ct, `{"items":[{"sku":"a"}]}`), "body.items[1] removed"},
		{"tolerance abs", []Rule{{Tolerance: "body.total", Abs: 0.01}}, resp(200, ct, `{"total":10.00}`), resp(200, ct, `{"total":10.005}`), ""},
		{"tolerance abs exceeded", []Rule{{Tolerance: "body.total", Abs: 0.01}}, resp(200, ct, `{"total":10.00}`), resp(200, ct, `{"total":10.5}`), "body.total changed"},
		{"tolerance rel", []Rule{{Tolerance: "**.lat", Rel: 0.01}}, resp(200, ct, `{"x":{"lat":100}}`), resp(200, ct, `{"x":{"lat":100.9}}`), ""},
		{"text body", nil, resp(200, "", "line1\nline2\n"), resp(200, "", "line1\nLINE2\n"), "body changed"},
		{"text vs json", nil, resp(200, "", `{"a":1}`), resp(200, "", `oops`), "body changed"},
		{"empty body", nil, resp(200, "", `abc`), resp(200, "", ``), "body removed"},
		{"whole body ignored", []Rule{{Ignore: "body"}}, resp(200, "", `abc`), resp(200, "", `def`), ""},
		{"gzip decoded", nil, resp(200, ct+"Content-Encoding: gzip\r\n", gz(`{"a":1}`)), resp(200, ct, `{"a":1}`), ""},
		{"gzip decoded with difference", nil, resp(200, ct+"Content-Encoding: gzip\r\n", gz(`{"a":1}`)), resp(200, ct, `{"a":2}`), "body.a changed"},
		{"chunked decoded", nil, chunked(`{"a":[1,2,3]}`), resp(200, ct, `{"a":[1,2,3]}`), ""},
		{"chunked with difference", nil, chunked(`{"a":[1,2,3]}`), resp(200, ct, `{"a":[1,2,4]}`), "body.a[2] changed"},
		{"interim response skipped", nil, append([]byte("HTTP/1.1 100 Continue\r\n\r\n"), resp(200, "", "x")...), resp(200, "", "x"), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRules(t, tc.rules...)
			w, err := http1.ParseResponse(tc.want, "GET")
			if err != nil {
				t.Fatal(err)
			}
			g, err := http1.ParseResponse(tc.got, "GET")
			if err != nil {
				t.Fatal(err)
			}
			ds := r.CompareResponses("GET /x", w, g)
			if got := paths(ds); got != tc.diffs {
				t.Errorf("differences %q, want %q (%v)", got, tc.diffs, ds)
			}
		})
	}
}

func TestTruncatedRecording(t *testing.T) {
	full := resp(200, "", "abcdefgh")
	w, err := http1.ParseResponse(full[:len(full)-3], "GET")
	if err != nil {
		t.Fatal(err)
	}
	if !w.Truncated || string(w.Body) != "abcde" {
		t.Fatalf("truncated=%v body=%q", w.Truncated, w.Body)
	}
	g, _ := http1.ParseResponse(full, "GET")
	if ds := (*Rules)(nil).CompareResponses("", w, g); len(ds) != 0 {
		t.Errorf("prefix should compare equal: %v", ds)
	}
	g, _ = http1.ParseResponse(resp(200, "", "abXdefgh"), "GET")
	if ds := (*Rules)(nil).CompareResponses("", w, g); paths(ds) != "body changed" {
		t.Errorf("got %v", ds)
	}
}

func TestDiffValues(t *testing.T) {
	w, _ := http1.ParseResponse(resp(200, "", `{"a":{"b":[1,{"c":"x"}]}}`), "GET")
	g, _ := http1.ParseResponse(resp(201, "", `{"a":{"b":[1,{"c":"y"}]}}`), "GET")
	ds := (*Rules)(nil).CompareResponses("", w, g)
	want := []Difference{
		{Path: "status", Kind: Changed, Want: "200", Got: "201"},
		{Path: "body.a.b[1].c", Kind: Changed, Want: `"x"`, Got: `"y"`},
	}
	if fmt.Sprint(ds) != fmt.Sprint(want) {
		t.Errorf("got %v\nwant %v", ds, want)
	}
}

func TestMaxDiffs(t *testing.T) {
	var a, b strings.Builder
	a.WriteString("[")
	b.WriteString("[")
	for i := 0; i < MaxDiffs+10; i++ {
		if i > 0 {
			a.WriteString(",")
			b.WriteString(",")
		}
		fmt.Fprintf(&a, "%d", i)
		fmt.Fprintf(&b, "%d", i+1)
	}
	a.WriteString("]")
	b.WriteString("]")
	w, _ := http1.ParseResponse(resp(200, "", a.String()), "GET")
	g, _ := http1.ParseResponse(resp(200, "", b.String()), "GET")
	ds := (*Rules)(nil).CompareResponses("", w, g)
	if len(ds) != MaxDiffs+1 || ds[MaxDiffs].Note != "10 more differences not shown" {
		t.Errorf("got %d differences, last %v", len(ds), ds[len(ds)-1])
	}
}

func redisCmd(args ...string) string {
	s := fmt.Sprintf("*%d\r\n", len(args))
	for _, a := range args {
		s += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
	}
	return s
}

func mysqlPacket(cmd byte, sql string) string {
	n := len(sql) + 1
	return string([]byte{byte(n), byte(n >> 8), byte(n >> 16), 0, cmd}) + sql
}

// execute renders a COM_STMT_EXECUTE payload (after the command byte)
// binding a BIGINT and a string.
func execute(n int64, s string) string {
	var b []byte
	b = append(b, 1, 0, 0, 0)    // statement id
	b = append(b, 0, 1, 0, 0, 0) // flags, iteration count
	b = append(b, 0, 1)          // NULL bitmap, new params bound
	b = append(b, 0x08, 0, 0xfe, 0)
	for i := 0; i < 8; i++ {
		b = append(b, byte(n>>(8*i)))
	}
	b = append(b, byte(len(s)))
	return string(append(b, s...))
}

func TestInsignificant(t *testing.T) {
	if !Insignificant("mysql", []byte(mysqlPacket(0x19, "\x01\x00\x00\x00")+mysqlPacket(0x01, ""))) {
		t.Error("COM_STMT_CLOSE + COM_QUIT is significant")
	}
	if Insignificant("mysql", []byte(mysqlPacket(0x03, "SELECT 1"))) || Insignificant("redis", []byte("")) {
		t.Error("a query is insignificant")
	}
}

func httpReq(method, target, headers, body string) string {
	return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: stock:80\r\n%sContent-Length: %d\r\n\r\n%s", method, target, headers, len(body), body)
}

func TestCompareCalls(t *testing.T) {
	cases := []struct {
		name        string
		rules       []Rule
		proto       string
		want, got   string
		diffs       string
		wantContain string
	}{
		{"equal bytes", nil, "raw", "abc", "abc", "", ""},
		{"raw bytes", nil, "raw", "abcdef", "abcXef", "bytes changed", "first difference at byte 3"},
		{"redis arg", nil, "redis", redisCmd("SET", "k", "1"), redisCmd("SET", "k", "2"), "args[2] changed", ""},
		{"redis extra arg", nil, "redis", redisCmd("SET", "k", "1"), redisCmd("SET", "k", "1", "EX", "10"), "args[3] added, args[4] added", ""},
		{"redis pipeline", nil, "redis", redisCmd("GET", "a") + redisCmd("GET", "b"), redisCmd("GET", "a") + redisCmd("GET", "c"), "cmd[1].args[1] changed", ""},
		{"redis pipeline shorter", nil, "redis", redisCmd("GET", "a") + redisCmd("GET", "b"), redisCmd("GET", "a"), "cmd[1] removed", ""},
		{"redis ignored arg", []Rule{{Ignore: "args[2]", Scope: ScopeDownstream}}, "redis", redisCmd("SET", "k", "1"), redisCmd("SET", "k", "2"), "", ""},
		{"redis inline", nil, "redis", "PING\r\n", "PONG\r\n", "args[0] changed", ""},
		{"redis not resp", nil, "redis", "\x00\x01", "\x00\x02", "bytes changed", ""},
		{"sql whitespace", nil, "mysql", mysqlPacket(3, "SELECT  *\n FROM t WHERE a = 'x  y';"), mysqlPacket(3, "SELECT * FROM t WHERE a = 'x  y'"), "", ""},
		{"sql changed", nil, "mysql", mysqlPacket(3, "SELECT a FROM t"), mysqlPacket(3, "SELECT b FROM t"), "sql changed", "SELECT b FROM t"},
		{"sql quoted spaces kept", nil, "mysql", mysqlPacket(3, "SELECT 'a b'"), mysqlPacket(3, "SELECT 'a  b'"), "sql changed", ""},
		{"mysql execute params", nil, "mysql", mysqlPacket(0x17, "\x01\x00\x00\x00\x00\x01\x00\x00\x00\x07"), mysqlPacket(0x17, "\x01\x00\x00\x00\x00\x01\x00\x00\x00\x08"), "params changed", `"\x00\x01\x00\x00\x00\a" → "\x00\x01\x00\x00\x00\b"`},
		{"mysql execute statement id", nil, "mysql", mysqlPacket(0x17, "\x01\x00\x00\x00\x00"), mysqlPacket(0x17, "\x02\x00\x00\x00\x00"), "stmt_id changed", ""},
		{"mysql statement id ignored", []Rule{{Ignore: "stmt_id"}}, "mysql", mysqlPacket(0x19, "\x01\x00\x00\x00"), mysqlPacket(0x19, "\x02\x00\x00\x00"), "", ""},
		{"mysql command changed", nil, "mysql", mysqlPacket(0x03, "SELECT 1"), mysqlPacket(0x16, "SELECT 1"), "command changed", ""},
		{"mysql close before prepare", nil, "mysql", mysqlPacket(0x19, "\x01\x00\x00\x00") + mysqlPacket(0x16, "SELECT ?"),
			mysqlPacket(0x19, "\x09\x00\x00\x00") + mysqlPacket(0x16, "SELECT  ?"), "", ""},
		{"mysql two packets", nil, "mysql", mysqlPacket(0x03, "SET a=1") + mysqlPacket(0x03, "SELECT 1"),
			mysqlPacket(0x03, "SET a=1") + mysqlPacket(0x03, "SELECT 2"), "packet[1].sql changed", ""},
		{"mysql execute values", nil, "mysql", mysqlPacket(0x17, execute(7, "DE")), mysqlPacket(0x17, execute(8, "DE")), "params[0] changed", "7 → 8"},
		{"mysql execute string value", nil, "mysql", mysqlPacket(0x17, execute(7, "DE")), mysqlPacket(0x17, execute(7, "FR")), "params[1] changed", `"DE" → "FR"`},
		{"mysql execute value ignored", []Rule{{Ignore: "params[1]"}}, "mysql", mysqlPacket(0x17, execute(7, "DE")), mysqlPacket(0x17, execute(7, "FR")), "", ""},
		{"mysql other command", nil, "mysql", mysqlPacket(0x02, "db1"), mysqlPacket(0x02, "db2"), "bytes changed", ""},
		{"mysql short execute", nil, "mysql", mysqlPacket(0x17, "\x01"), mysqlPacket(0x17, "\x02"), "bytes changed", ""},
		{"http json body", nil, "http", httpReq("POST", "/stock", "Content-Type: application/json\r\n", `{"sku":"a","qty":1}`),
			httpReq("POST", "/stock", "Content-Type: application/json\r\n", `{"qty":2,"sku":"a"}`), "body.qty changed", ""},
		{"http target and method", nil, "http", httpReq("GET", "/a?x=1", "", ""), httpReq("PUT", "/a?x=2", "", ""), "method changed, target changed", ""},
		{"http header", nil, "http", httpReq("GET", "/a", "X-Id: 1\r\n", ""), httpReq("GET", "/a", "X-Id: 2\r\n", ""), "header.X-Id changed", ""},
		{"http header ignored for dst", []Rule{{IgnoreHeader: "X-Id", Scope: ScopeDownstream, Dst: "stock:*"}}, "http",
			httpReq("GET", "/a", "X-Id: 1\r\n", ""), httpReq("GET", "/a", "X-Id: 2\r\n", ""), "", ""},
		{"http header rule for other dst", []Rule{{IgnoreHeader: "X-Id", Scope: ScopeDownstream, Dst: "other:*"}}, "http",
			httpReq("GET", "/a", "X-Id: 1\r\n", ""), httpReq("GET", "/a", "X-Id: 2\r\n", ""), "header.X-Id changed", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRules(t, tc.rules...)
			ds := r.CompareCalls("GET /x", tc.proto, "stock:80", []byte(tc.want), []byte(tc.got))
			if got := paths(ds); got != tc.diffs {
				t.Errorf("differences %q, want %q (%v)", got, tc.diffs, ds)
			}
			if tc.wantContain != "" && !strings.Contains(fmt.Sprint(ds), tc.wantContain) {
				t.Errorf("%v does not mention %q", ds, tc.wantContain)
			}
		})
	}
}

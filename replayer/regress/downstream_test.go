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
			fs, calls := downstream(rules, "GET /x", sess, &mockserver.TraceReport{Calls: tc.calls, Unused: tc.unused})
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

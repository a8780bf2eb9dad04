package report

import (
	"strings"
	"testing"

	"github.com/retrace-dev/retrace/replayer/diff"
	"github.com/retrace-dev/retrace/replayer/regress"
	"github.com/retrace-dev/retrace/wire/redis"
)

func mysqlPacket(p string) []byte {
	return append([]byte{byte(len(p)), byte(len(p) >> 8), byte(len(p) >> 16), 0}, p...)
}

// MySQL and Redis calls show decoded, the parameter that differs
// highlighted on both sides, not as escaped wire bytes.
func TestDecodedCallsHighlightTheDifference(t *testing.T) {
	rules, err := diff.NewRules()
	if err != nil {
		t.Fatal(err)
	}
	execute := func(v byte) []byte {
		return mysqlPacket("\x17\x01\x00\x00\x00\x00\x01\x00\x00\x00\x00\x01\x08\x00" + string([]byte{v, 0, 0, 0, 0, 0, 0, 0}))
	}
	cases := []struct {
		name, proto string
		want, got   []byte
		marked      string // what the replayed side highlights
	}{
		{"redis", "redis", redis.Command("SET", "cart:7", "42"), redis.Command("SET", "cart:7", "43"), `<mark data-path="args[2]">args[2]  43</mark>`},
		{"mysql execute", "mysql", execute(42), execute(43), `<mark data-path="params[0]">params[0]  43</mark>`},
		{"mysql query", "mysql", mysqlPacket("\x03SELECT a FROM t"), mysqlPacket("\x03SELECT b FROM t"), `<mark data-path="sql">sql  SELECT b FROM t</mark>`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ds := rules.CompareCalls("GET /", tc.proto, "db:1", tc.want, tc.got)
			if len(ds) == 0 {
				t.Fatal("no difference found")
			}
			got := string(renderCall(tc.proto, tc.got, sideMarks(ds, false)))
			if !strings.Contains(got, tc.marked) {
				t.Errorf("replayed side %q lacks %q (differences %v)", got, tc.marked, ds)
			}
			if strings.Contains(got, `\x`) {
				t.Errorf("replayed side %q shows escaped bytes", got)
			}
			if rec := string(renderCall(tc.proto, tc.want, sideMarks(ds, true))); !strings.Contains(rec, "<mark") {
				t.Errorf("recorded side %q highlights nothing", rec)
			}
		})
	}
}

// Calls are listed in the order they started: by their recorded call,
// a call without recording after the one that arrived before it.
func TestCallsInStartOrder(t *testing.T) {
	calls := []regress.CallDetail{ // as regress lists them: by arrival, then unused recorded calls
		{CallRef: regress.CallRef{Seq: 0, Matched: 2}},
		{CallRef: regress.CallRef{Seq: 1, Matched: 0}},
		{CallRef: regress.CallRef{Seq: 2, Matched: -1}}, // no recording
		{CallRef: regress.CallRef{Seq: -1, Matched: 1}}, // never made
	}
	var order []int
	for _, c := range inStartOrder(calls) {
		order = append(order, c.Seq)
	}
	want := []int{1, 2, -1, 0} // recorded 0, the unrecorded call that arrived after it, recorded 1, recorded 2
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order by Seq %v, want %v", order, want)
		}
	}
}

package mockserver

import (
	"github.com/retrace-dev/retrace/wire"
	"strconv"
	"testing"
)

func TestSimilarity(t *testing.T) {
	cases := []struct {
		name string
		got  float64
		want float64
	}{
		{"hamming equal", hamming([]byte("abcd"), []byte("abcd")), 1},
		{"hamming one byte off", hamming([]byte("abcd"), []byte("abce")), 0.75},
		{"hamming prefix counts against length", hamming([]byte("ab"), []byte("abcd")), 0.5},
		{"hamming empty", hamming(nil, nil), 1},
		{"json equal", jsonScore(`{"a":1,"b":[1,2]}`, `{"b":[1,2],"a":1}`), 1},
		{"json half the fields", jsonScore(`{"a":1,"b":2}`, `{"a":1,"b":3}`), 0.5},
		{"json union of fields", jsonScore(`{"a":1}`, `{"a":1,"b":2}`), 0.5},
		{"args", argsRatio([][]byte{[]byte("x"), []byte("y")}, [][]byte{[]byte("x"), []byte("z")}), 0.5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("got %v, want %v", tc.got, tc.want)
			}
		})
	}
	if _, ok := flatJSON([]byte("not json")); ok {
		t.Fatal("flatJSON accepted text")
	}
}

func jsonScore(a, b string) float64 {
	fa, _ := flatJSON([]byte(a))
	fb, _ := flatJSON([]byte(b))
	return jsonRatio(fa, fb)
}

// The order strategy takes each call once, in recorded order, per
// operation; first and last reuse.
func TestPickOrderFirstLast(t *testing.T) {
	du := &dstUnits{byOp: map[string][]int{"GET": {0, 2}, "SET": {1}}}
	du.units = make([]unit, 3)
	used := make([]bool, 3)
	cur := map[string]int{}
	live := &wire.Request{Op: "GET"}
	var got []int
	for range 3 {
		res, why := match([]Strategy{StrategyOrder}, live, du, used, cur)
		if why != "" {
			got = append(got, -1)
			continue
		}
		used[res.unit] = true
		got = append(got, res.unit)
	}
	if got[0] != 0 || got[1] != 2 || got[2] != -1 {
		t.Fatalf("order took %v, want [0 2 -1]", got)
	}
	if res, _ := match([]Strategy{StrategyLast}, live, du, used, cur); res.unit != 2 {
		t.Fatalf("last took %d", res.unit)
	}
	if _, why := match([]Strategy{StrategyOrder}, &wire.Request{Op: "DEL"}, du, used, cur); why == "" {
		t.Fatal("an operation never recorded matched")
	}
}

// The observation log keeps every call in order across its blocks, numbers
// them, and counts those beyond the limit.
func TestObserveKeepsOrderAndLimit(t *testing.T) {
	ts := &traceState{}
	const limit = 3000
	for i := range limit + 5 {
		ts.observe(ObservedCall{Request: []byte(strconv.Itoa(i))}, limit)
	}
	r := (&Server{}).report(ts, "t", "")
	if len(r.Calls) != limit || r.Dropped != 5 {
		t.Fatalf("%d calls, %d dropped; want %d, 5", len(r.Calls), r.Dropped, limit)
	}
	for i, c := range r.Calls {
		if c.Seq != i || string(c.Request) != strconv.Itoa(i) {
			t.Fatalf("call %d: seq %d, request %q", i, c.Seq, c.Request)
		}
	}
	if n := len(ts.calls.blocks); n > 12 {
		t.Errorf("%d blocks for %d calls", n, limit)
	}
}

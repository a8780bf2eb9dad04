package mockserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/retrace-dev/retrace/wire"
	"strconv"
)

// matchResult is the recorded unit a strategy chose for a live request.
type matchResult struct {
	unit     int
	strategy Strategy
	score    float64
}

// match runs the chain over the units of one trace and destination. used
// marks units already taken; cursor keeps, per operation, the position of
// the order strategy. It returns a reason when no strategy found a unit.
func match(chain []Strategy, live *wire.Request, du *dstUnits, used []bool, cursor map[string]int) (matchResult, string) {
	if du == nil {
		return matchResult{}, "the recording has no call to this destination"
	}
	cands := du.byOp[live.Op]
	if len(cands) == 0 {
		return matchResult{}, fmt.Sprintf("the recording has no %q call to this destination", live.Op)
	}
	for _, st := range chain {
		if i, score, ok := pick(st, live, du, cands, used, cursor); ok {
			return matchResult{unit: i, strategy: st, score: score}, ""
		}
	}
	return matchResult{}, fmt.Sprintf("all %d recorded %q calls to this destination are used (strategies %v)", len(cands), live.Op, chain)
}

func pick(st Strategy, live *wire.Request, du *dstUnits, cands []int, used []bool, cursor map[string]int) (int, float64, bool) {
	switch st {
	case StrategyOrder:
		c := cursor[live.Op]
		for c < len(cands) && used[cands[c]] {
			c++
		}
		cursor[live.Op] = c
		if c < len(cands) {
			return cands[c], 1, true
		}
	case StrategyFirst:
		return cands[0], 1, true
	case StrategyLast:
		return cands[len(cands)-1], 1, true
	case StrategyHamming:
		return best(cands, used, func(i int) float64 { return hamming(live.Canon, du.units[i].req.Canon) })
	case StrategyJSON:
		lv, ok := flatJSON(live.Body)
		if !ok {
			return 0, 0, false
		}
		i, score, ok := best(cands, used, func(i int) float64 {
			rv, ok := du.flatJSON(i)
			if !ok {
				return 0
			}
			return jsonRatio(lv, rv)
		})
		return i, score, ok && score > 0
	case StrategySQL:
		if live.Key == "" {
			return 0, 0, false
		}
		return best(cands, used, func(i int) float64 {
			r := &du.units[i].req
			if r.Key == live.Key && bytes.Equal(r.Canon, live.Canon) {
				return 1
			}
			return argsRatio(live.Args, r.Args)
		})
	case StrategyRedis:
		return best(cands, used, func(i int) float64 {
			r := &du.units[i].req
			if r.Key != live.Key {
				return -1
			}
			return argsRatio(live.Args, r.Args)
		})
	}
	return 0, 0, false
}

// best returns the unused candidate with the highest score (the earliest on
// ties); a negative score excludes a candidate.
func best(cands []int, used []bool, score func(int) float64) (int, float64, bool) {
	bi, bs := -1, -1.0
	for _, i := range cands {
		if used[i] {
			continue
		}
		if s := score(i); s > bs && s >= 0 {
			bi, bs = i, s
			if s == 1 {
				break
			}
		}
	}
	return bi, bs, bi >= 0
}

// hamming is the share of equal bytes between a and b over the shorter
// length, scaled by the ratio of the lengths so a prefix does not count as
// equal. 1 means equal.
func hamming(a, b []byte) float64 {
	n, m := len(a), len(b)
	if n > m {
		a, b, n, m = b, a, m, n
	}
	if m == 0 {
		return 1
	}
	eq := 0
	for i := 0; i < n; i++ {
		if a[i] == b[i] {
			eq++
		}
	}
	return float64(eq) / float64(m)
}

func argsRatio(a, b [][]byte) float64 {
	n := max(len(a), len(b))
	if n == 0 {
		return 1
	}
	eq := 0
	for i := 0; i < min(len(a), len(b)); i++ {
		if bytes.Equal(a[i], b[i]) {
			eq++
		}
	}
	return float64(eq) / float64(n)
}

// flatJSON decodes b as JSON and flattens it into path → scalar text. It
// reports false for bytes that are not JSON objects or arrays.
func flatJSON(b []byte) (map[string]string, bool) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || (b[0] != '{' && b[0] != '[') {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	out := map[string]string{}
	var walk func(p string, v any)
	walk = func(p string, v any) {
		switch t := v.(type) {
		case map[string]any:
			for k, x := range t {
				walk(p+"."+k, x)
			}
		case []any:
			for i, x := range t {
				walk(p+"["+strconv.Itoa(i)+"]", x)
			}
		default:
			out[p] = fmt.Sprint(t)
		}
	}
	walk("$", v)
	return out, true
}

// jsonRatio is the share of fields, over the union of both documents'
// fields, whose values are equal.
func jsonRatio(a, b map[string]string) float64 {
	union := len(a)
	eq := 0
	for k, v := range b {
		av, ok := a[k]
		if !ok {
			union++
		} else if av == v {
			eq++
		}
	}
	if union == 0 {
		return 1
	}
	return float64(eq) / float64(union)
}

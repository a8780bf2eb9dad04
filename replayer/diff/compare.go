package diff

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/retrace-dev/retrace/wire/http1"
)

// Kind says how a value differs.
type Kind string

// Kinds of difference.
const (
	Changed Kind = "changed" // present on both sides with different values
	Added   Kind = "added"   // present only in the replay
	Removed Kind = "removed" // present only in the recording
)

// Difference is one value that differs between the recording ("want") and
// the replay ("got").
type Difference struct {
	Path string `json:"path"`
	Kind Kind   `json:"kind"`
	Want string `json:"want,omitempty"` // the recorded value: compact JSON, or a text excerpt
	Got  string `json:"got,omitempty"`  // the replayed value
	Note string `json:"note,omitempty"`
}

func (d Difference) String() string {
	s := fmt.Sprintf("%s %s", d.Path, d.Kind)
	switch d.Kind {
	case Changed:
		s += fmt.Sprintf(": %s → %s", d.Want, d.Got)
	case Added:
		s += ": " + d.Got
	case Removed:
		s += ": " + d.Want
	}
	if d.Note != "" {
		s += " (" + d.Note + ")"
	}
	return s
}

// MaxDiffs bounds the differences reported for one message; the rest are
// counted in a final entry with path "…".
const MaxDiffs = 100

// maxValue bounds the rendering of one value in a Difference.
const maxValue = 240

// collector gathers the differences of one comparison.
type collector struct {
	v       *view
	out     []Difference
	omitted int
	path    []segment
}

func (c *collector) push(s segment) { c.path = append(c.path, s) }
func (c *collector) pop()           { c.path = c.path[:len(c.path)-1] }

func (c *collector) add(k Kind, want, got, note string) {
	if len(c.out) >= MaxDiffs {
		c.omitted++
		return
	}
	c.out = append(c.out, Difference{Path: renderPath(c.path), Kind: k, Want: want, Got: got, Note: note})
}

func (c *collector) result() []Difference {
	if c.omitted > 0 {
		c.out = append(c.out, Difference{Path: "…", Kind: Changed, Note: fmt.Sprintf("%d more differences not shown", c.omitted)})
	}
	return c.out
}

// CompareResponses compares a replayed response with the recorded one under
// the rules that apply to api in the response scope. It returns nil when
// they are equal.
func (r *Rules) CompareResponses(api string, want, got *http1.ParsedResponse) []Difference {
	c := &collector{v: r.view(api, ScopeResponse, "")}
	c.push(keySeg("status"))
	if want.Status != got.Status && !c.v.ignored(c.path) {
		c.add(Changed, strconv.Itoa(want.Status), strconv.Itoa(got.Status), "")
	}
	c.pop()
	c.headers(want.Header, got.Header)
	c.body(want.Header, want.Body, want.Truncated, got.Header, got.Body)
	return c.result()
}

func (c *collector) headers(want, got http.Header) {
	names := make([]string, 0, len(want)+len(got))
	for k := range want {
		names = append(names, http.CanonicalHeaderKey(k))
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			names = append(names, http.CanonicalHeaderKey(k))
		}
	}
	sort.Strings(names)
	c.push(keySeg("header"))
	defer c.pop()
	prev := ""
	for _, k := range names {
		if k == prev || c.v.headerIgnored(k) {
			continue
		}
		prev = k
		c.push(keySeg(k))
		if !c.v.ignored(c.path) {
			w, wok := want[k]
			g, gok := got[k]
			ws, gs := strings.Join(w, ", "), strings.Join(g, ", ")
			switch {
			case !gok:
				c.add(Removed, ws, "", "")
			case !wok:
				c.add(Added, "", gs, "")
			case ws != gs:
				c.add(Changed, ws, gs, "")
			}
		}
		c.pop()
	}
}

// body compares two decoded bodies: structurally when both are JSON
// documents, as text otherwise.
func (c *collector) body(wh http.Header, want []byte, wantTrunc bool, gh http.Header, got []byte) {
	c.push(keySeg("body"))
	defer c.pop()
	if c.v.ignored(c.path) || bytes.Equal(want, got) {
		return
	}
	if wantTrunc {
		if !bytes.HasPrefix(got, want) {
			c.text(want, got, "recorded body was truncated; compared as a prefix")
		}
		return
	}
	if wv, ok := decodeJSON(want); ok {
		if gv, ok := decodeJSON(got); ok {
			c.value(wv, gv)
			return
		}
	}
	c.text(want, got, "")
}

// decodeJSON decodes b when it is one JSON object or array (numbers kept
// exact as json.Number).
func decodeJSON(b []byte) (any, bool) {
	t := bytes.TrimLeft(b, " \t\r\n")
	if len(t) == 0 || (t[0] != '{' && t[0] != '[') {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	if dec.More() {
		return nil, false
	}
	return v, true
}

// text reports the first differing line of two text bodies.
func (c *collector) text(want, got []byte, note string) {
	switch {
	case len(want) == 0:
		c.add(Added, "", excerpt(got), note)
		return
	case len(got) == 0:
		c.add(Removed, excerpt(want), "", note)
		return
	}
	wl := bytes.Split(want, []byte("\n"))
	gl := bytes.Split(got, []byte("\n"))
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g []byte
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if !bytes.Equal(w, g) || i >= len(wl) || i >= len(gl) {
			n := fmt.Sprintf("line %d", i+1)
			if note != "" {
				n += "; " + note
			}
			c.add(Changed, excerpt(w), excerpt(g), n)
			return
		}
	}
}

// excerpt renders bytes for a report: text as is, binary quoted; cut at
// maxValue.
func excerpt(b []byte) string {
	cut := false
	if len(b) > maxValue {
		b, cut = b[:maxValue], true
	}
	var s string
	if utf8.Valid(b) {
		s = string(b)
	} else {
		s = strconv.Quote(string(b))
	}
	if cut {
		s += "…"
	}
	return s
}

func render(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return excerpt(b)
}

func typeName(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// value compares two decoded JSON values at c.path (already checked
// against the ignore rules).
func (c *collector) value(want, got any) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			break
		}
		c.object(w, g)
		return
	case []any:
		g, ok := got.([]any)
		if !ok {
			break
		}
		c.array(w, g)
		return
	case json.Number:
		g, ok := got.(json.Number)
		if !ok {
			break
		}
		if w != g && !c.numbersEqual(w, g) {
			c.add(Changed, string(w), string(g), "")
		}
		return
	default:
		if typeName(want) != typeName(got) {
			break
		}
		if want != got {
			c.add(Changed, render(want), render(got), "")
		}
		return
	}
	c.add(Changed, render(want), render(got), fmt.Sprintf("%s → %s", typeName(want), typeName(got)))
}

func (c *collector) object(want, got map[string]any) {
	keys := make([]string, 0, len(want)+len(got))
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		c.push(keySeg(k))
		if !c.v.ignored(c.path) {
			w, wok := want[k]
			g, gok := got[k]
			switch {
			case !gok:
				c.add(Removed, render(w), "", "")
			case !wok:
				c.add(Added, "", render(g), "")
			default:
				c.value(w, g)
			}
		}
		c.pop()
	}
}

func (c *collector) array(want, got []any) {
	for _, u := range c.v.unordered {
		if u.pat.match(c.path) {
			c.unordered(want, got, u.key)
			return
		}
	}
	n := max(len(want), len(got))
	for i := 0; i < n; i++ {
		c.push(idxSeg(i))
		if !c.v.ignored(c.path) {
			switch {
			case i >= len(got):
				c.add(Removed, render(want[i]), "", "")
			case i >= len(want):
				c.add(Added, "", render(got[i]), "")
			default:
				c.value(want[i], got[i])
			}
		}
		c.pop()
	}
}

// unordered compares arrays as multisets: elements are paired by equal
// canonical form (ignored fields left out) or, with key, by the value of
// that field; unpaired elements are compared in order, then reported as
// added or removed. Paths use the recorded index (the replayed index for
// added elements).
func (c *collector) unordered(want, got []any, key string) {
	canon := func(v any, i int) string {
		c.push(idxSeg(i))
		defer c.pop()
		if key != "" {
			m, ok := v.(map[string]any)
			if !ok {
				return "\x00" + strconv.Itoa(i) // not an object: never paired by key
			}
			return render(m[key])
		}
		var b strings.Builder
		c.canonical(&b, v)
		return b.String()
	}
	byForm := map[string][]int{}
	for j, g := range got {
		f := canon(g, j)
		byForm[f] = append(byForm[f], j)
	}
	usedGot := make([]bool, len(got))
	var lostWant []int
	for i, w := range want {
		f := canon(w, i)
		if js := byForm[f]; len(js) > 0 {
			j := js[0]
			byForm[f] = js[1:]
			usedGot[j] = true
			if key != "" { // paired by key: the rest of the element may differ
				c.push(idxSeg(i))
				if !c.v.ignored(c.path) {
					c.value(w, got[j])
				}
				c.pop()
			}
			continue
		}
		lostWant = append(lostWant, i)
	}
	var lostGot []int
	for j, u := range usedGot {
		if !u {
			lostGot = append(lostGot, j)
		}
	}
	for k := 0; k < len(lostWant) || k < len(lostGot); k++ {
		switch {
		case k >= len(lostGot):
			c.push(idxSeg(lostWant[k]))
			if !c.v.ignored(c.path) {
				c.add(Removed, render(want[lostWant[k]]), "", "")
			}
		case k >= len(lostWant):
			c.push(idxSeg(lostGot[k]))
			if !c.v.ignored(c.path) {
				c.add(Added, "", render(got[lostGot[k]]), "")
			}
		default:
			c.push(idxSeg(lostWant[k]))
			if !c.v.ignored(c.path) {
				if key != "" {
					c.add(Removed, render(want[lostWant[k]]), "", "no replayed element with this "+key)
					c.pop()
					c.push(idxSeg(lostGot[k]))
					if !c.v.ignored(c.path) {
						c.add(Added, "", render(got[lostGot[k]]), "no recorded element with this "+key)
					}
				} else {
					c.value(want[lostWant[k]], got[lostGot[k]])
				}
			}
		}
		c.pop()
	}
}

// canonical writes v with sorted keys, leaving out ignored paths, so
// elements that differ only in ignored fields have the same form.
func (c *collector) canonical(b *strings.Builder, v any) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for _, k := range keys {
			c.push(keySeg(k))
			if !c.v.ignored(c.path) {
				b.WriteString(strconv.Quote(k))
				b.WriteByte(':')
				c.canonical(b, x[k])
				b.WriteByte(',')
			}
			c.pop()
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			c.push(idxSeg(i))
			if !c.v.ignored(c.path) {
				c.canonical(b, e)
			}
			b.WriteByte(',')
			c.pop()
		}
		b.WriteByte(']')
	case json.Number:
		if f, err := x.Float64(); err == nil {
			b.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
		} else {
			b.WriteString(string(x))
		}
	default:
		b.WriteString(render(x))
	}
}

// numbersEqual compares numbers by value (1 == 1.0) and applies the
// tolerance rules of the current path.
func (c *collector) numbersEqual(want, got json.Number) bool {
	w, err1 := want.Float64()
	g, err2 := got.Float64()
	if err1 != nil || err2 != nil {
		return false
	}
	if w == g {
		return true
	}
	for _, t := range c.v.tolerance {
		if !t.pat.match(c.path) {
			continue
		}
		d := math.Abs(w - g)
		if t.abs > 0 && d <= t.abs {
			return true
		}
		if t.rel > 0 && d <= t.rel*math.Max(math.Abs(w), math.Abs(g)) {
			return true
		}
	}
	return false
}

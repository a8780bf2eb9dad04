package diff

import (
	"encoding/json"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/retrace-dev/retrace/wire"
)

// CompareDecoded compares two messages in their protocol's decoded form
// (wire.Decoded.Fields) under the rules that apply to api in scope
// (ScopeResponse or ScopeDownstream) and, downstream, to destination dst.
// The fields' paths are the paths of the differences: the fields are put
// back into a tree by their paths, so rules apply to them as to a JSON
// body — ignored paths and their subtrees, arrays compared without order
// (optionally paired by a key field), numbers within a tolerance (a value
// that reads as a number is one). Fields under "header." and "trailer."
// are headers: the header ignore rules apply to their names. A "body"
// field that is JSON on both sides is compared structurally, other text
// line by line. A path that occurs more than once (a repeated header)
// joins its values with ", ".
func (r *Rules) CompareDecoded(api, scope, dst string, want, got wire.Decoded) []Difference {
	c := &collector{v: r.view(api, scope, dst)}
	c.decoded(unflatten(want.Fields), unflatten(got.Fields))
	return c.result()
}

// decoded compares the top level of two decoded trees.
func (c *collector) decoded(want, got map[string]any) {
	w, g := burst(want, got), burst(got, want)
	want, got = w, g
	for _, k := range unionKeys(want, got) {
		w, wok := want[k]
		g, gok := got[k]
		c.push(keySeg(k))
		switch {
		case c.v.ignored(c.path):
		case k == "header" || k == "trailer":
			c.headerTree(w, g)
		case !gok || !wok:
			c.missing(w, g, wok)
		case k == "body":
			ws, wIsText := w.(string)
			gs, gIsText := g.(string)
			if wIsText && gIsText {
				c.pop()
				c.bodyText(ws, gs)
				continue
			}
			c.fields(w, g)
		default:
			c.fields(w, g)
		}
		c.pop()
	}
}

// burst makes a single message comparable with a burst of several: a
// decoded form writes a burst under one list key ("cmd[1].args[0]",
// "packet[1].sql") and a single message without it ("args[0]", "sql"), so
// when other is such a list and m is not, m is that list's one element.
func burst(m, other map[string]any) map[string]any {
	if len(other) != 1 || len(m) == 0 {
		return m
	}
	for k, v := range other {
		l, list := v.([]any)
		if !list {
			return m
		}
		for _, e := range l { // a list of messages, not of values
			if _, ok := e.(map[string]any); !ok {
				return m
			}
		}
		if _, ok := m[k]; ok {
			return m
		}
		return map[string]any{k: []any{m}}
	}
	return m
}

// fields compares two decoded values at c.path (already checked against
// the ignore rules). A value that occurs once on one side and several
// times on the other (one SQL statement against two) is compared as a list
// of one.
func (c *collector) fields(want, got any) {
	wl, wList := want.([]any)
	gl, gList := got.([]any)
	_, wMap := want.(map[string]any)
	_, gMap := got.(map[string]any)
	switch {
	case wList && !gList && !gMap:
		gl, gList = []any{got}, true
	case gList && !wList && !wMap:
		wl, wList = []any{want}, true
	}
	wm, _ := want.(map[string]any)
	gm, _ := got.(map[string]any)
	switch {
	case wMap && gMap:
		for _, k := range unionKeys(wm, gm) {
			c.push(keySeg(k))
			if !c.v.ignored(c.path) {
				w, wok := wm[k]
				g, gok := gm[k]
				if wok && gok {
					c.fields(w, g)
				} else {
					c.missing(w, g, wok)
				}
			}
			c.pop()
		}
	case wList && gList:
		for _, u := range c.v.unordered {
			if u.pat.match(c.path) {
				c.unordered(wl, gl, u.key)
				return
			}
		}
		for i := 0; i < len(wl) || i < len(gl); i++ {
			c.push(idxSeg(i))
			if !c.v.ignored(c.path) {
				switch {
				case i >= len(gl):
					c.add(Removed, shown(wl[i]), "", "")
				case i >= len(wl):
					c.add(Added, "", shown(gl[i]), "")
				default:
					c.fields(wl[i], gl[i])
				}
			}
			c.pop()
		}
	default:
		ws, wText := want.(string)
		gs, gText := got.(string)
		if wText && gText {
			if ws != gs {
				c.add(Changed, leafText(ws), leafText(gs), "")
			}
			return
		}
		c.value(want, got)
	}
}

// leafText shows a decoded value as the protocol wrote it (SQL, a
// target, a Redis argument, a string parameter in its quotes); text with
// control characters quoted.
func leafText(s string) string {
	for _, r := range s {
		if r < 0x20 && r != '\t' && r != '\n' || r == 0x7f || r == utf8.RuneError {
			return excerpt([]byte(strconv.Quote(s)))
		}
	}
	return excerpt([]byte(s))
}

// shown renders a value present on one side only.
func shown(v any) string {
	if s, ok := v.(string); ok {
		return leafText(s)
	}
	return render(v)
}

// missing reports a value present on one side only; a list is reported
// element by element.
func (c *collector) missing(want, got any, recorded bool) {
	v := got
	if recorded {
		v = want
	}
	l, ok := v.([]any)
	if !ok {
		l = []any{v}
	}
	for i, e := range l {
		if ok {
			c.push(idxSeg(i))
		}
		if !c.v.ignored(c.path) {
			if recorded {
				c.add(Removed, shown(e), "", "")
			} else {
				c.add(Added, "", shown(e), "")
			}
		}
		if ok {
			c.pop()
		}
	}
}

// headerTree compares a header block's fields by name, leaving out the
// names the header rules ignore.
func (c *collector) headerTree(want, got any) {
	w, _ := want.(map[string]any)
	g, _ := got.(map[string]any)
	for _, name := range unionKeys(w, g) {
		if c.v.headerIgnored(name) {
			continue
		}
		wv, wok := w[name]
		gv, gok := g[name]
		ws, gs := headerValue(wv), headerValue(gv)
		c.push(keySeg(name))
		switch {
		case c.v.ignored(c.path):
		case !gok:
			c.add(Removed, ws, "", "")
		case !wok:
			c.add(Added, "", gs, "")
		case ws != gs:
			c.add(Changed, ws, gs, "")
		}
		c.pop()
	}
}

// headerValue is a header field's value as sent (values are text; a
// header that is a tree, an oddity, is shown as JSON).
func headerValue(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return string(x)
	case nil:
		return ""
	}
	return render(v)
}

// bodyText compares a text body: structurally when both sides are JSON.
func (c *collector) bodyText(want, got string) {
	c.push(keySeg("body"))
	defer c.pop()
	if want == got {
		return
	}
	if wv, ok := decodeJSON([]byte(want)); ok {
		if gv, ok := decodeJSON([]byte(got)); ok {
			c.value(wv, gv)
			return
		}
	}
	c.text([]byte(want), []byte(got), "")
}

func unionKeys(want, got map[string]any) []string {
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
	return keys
}

// unflatten puts decoded fields back into a tree of maps and lists by
// their paths. A leaf that reads as a JSON number is a json.Number (so
// tolerance rules apply), any other a string. Where a path is both a leaf
// and the parent of others, the leaf is kept under the key "".
func unflatten(fields []wire.Field) map[string]any {
	root := &node{}
	root.root = root
	for _, f := range fields {
		n := root
		for _, s := range fieldPath(f.Path) {
			n = n.child(s)
		}
		if n.set {
			n.value += ", " + f.Value
		} else {
			n.value, n.set = f.Value, true
		}
	}
	m, _ := root.tree(true).(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	return m
}

// node is one step of a tree being rebuilt.
type node struct {
	root  *node // the tree's root (header blocks are known by their place)
	value string
	set   bool
	keys  map[string]*node
	items []*node
}

func (n *node) child(s segment) *node {
	if s.index >= 0 && n.keys == nil {
		for len(n.items) <= s.index {
			n.items = append(n.items, &node{root: n.root})
		}
		return n.items[s.index]
	}
	if n.keys == nil {
		n.keys = map[string]*node{}
		for i, it := range n.items { // a list that turned out to have keys too
			n.keys["["+strconv.Itoa(i)+"]"] = it
		}
		n.items = nil
	}
	k := s.key
	if s.index >= 0 {
		k = "[" + strconv.Itoa(s.index) + "]"
	}
	c := n.keys[k]
	if c == nil {
		c = &node{root: n.root}
		n.keys[k] = c
	}
	return c
}

// tree is the node as a value; typed leaves read as numbers or JSON
// strings where they are, header blocks' leaves (root keys "header" and
// "trailer") stay text.
func (n *node) tree(typed bool) any {
	leaf := func(v string) any {
		if typed {
			return typedLeaf(v)
		}
		return v
	}
	switch {
	case n.keys != nil:
		m := make(map[string]any, len(n.keys)+1)
		for k, c := range n.keys {
			m[k] = c.tree(typed && !(n == n.root && (k == "header" || k == "trailer")))
		}
		if n.set {
			m[""] = leaf(n.value)
		}
		return m
	case n.items != nil:
		l := make([]any, len(n.items))
		for i, c := range n.items {
			l[i] = c.tree(typed)
		}
		if n.set {
			return map[string]any{"": leaf(n.value), "[*]": l}
		}
		return l
	case n.set:
		return leaf(n.value)
	}
	return nil
}

// typedLeaf is a field's value: a number when it reads as one (so
// tolerance rules apply), else its text.
func typedLeaf(v string) any {
	if v != "" && (v[0] == '-' || v[0] >= '0' && v[0] <= '9') && json.Valid([]byte(v)) {
		return json.Number(v)
	}
	return v
}

// fieldPath parses a field's rendered path into segments; a path that is
// not in the path syntax is one key.
func fieldPath(p string) []segment {
	pat, err := ParsePattern(p)
	if err != nil {
		return []segment{keySeg(p)}
	}
	segs := make([]segment, 0, len(pat.segs))
	for _, ps := range pat.segs {
		switch ps.kind {
		case patKey:
			segs = append(segs, keySeg(ps.key))
		case patIndex:
			segs = append(segs, idxSeg(ps.index))
		case patAnyIndex:
			segs = append(segs, keySeg("[*]"))
		case patAnyDepth:
			segs = append(segs, keySeg("**"))
		default:
			segs = append(segs, keySeg("*"))
		}
	}
	return segs
}

package diff

import (
	"encoding/json"
	"sort"
	"strconv"

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
	for _, k := range unionKeys(want, got) {
		w, wok := want[k]
		g, gok := got[k]
		c.push(keySeg(k))
		switch {
		case c.v.ignored(c.path):
		case k == "header" || k == "trailer":
			c.headerTree(w, g)
		case !gok:
			c.add(Removed, render(w), "", "")
		case !wok:
			c.add(Added, "", render(g), "")
		case k == "body":
			ws, wIsText := w.(string)
			gs, gIsText := g.(string)
			if wIsText && gIsText {
				c.pop()
				c.bodyText(ws, gs)
				continue
			}
			c.value(w, g)
		default:
			c.value(w, g)
		}
		c.pop()
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
	m, _ := root.tree().(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	return m
}

// node is one step of a tree being rebuilt.
type node struct {
	value string
	set   bool
	keys  map[string]*node
	items []*node
}

func (n *node) child(s segment) *node {
	if s.index >= 0 && n.keys == nil {
		for len(n.items) <= s.index {
			n.items = append(n.items, &node{})
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
		c = &node{}
		n.keys[k] = c
	}
	return c
}

func (n *node) tree() any {
	switch {
	case n.keys != nil:
		m := make(map[string]any, len(n.keys)+1)
		for k, c := range n.keys {
			m[k] = c.tree()
		}
		if n.set {
			m[""] = leaf(n.value)
		}
		return m
	case n.items != nil:
		l := make([]any, len(n.items))
		for i, c := range n.items {
			l[i] = c.tree()
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

// leaf is a field's value: a number when it reads as one.
func leaf(v string) any {
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

package wiretest

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/retrace-dev/retrace/wire"
)

// Rules is the kit's wire.MaskRules: header and field replacements by
// name, JSON keys replaced at any depth of whole documents, and patterns.
// recording.Masker is the real one; this one lets a protocol package test
// its Masker without it.
type Rules struct {
	Headers  map[string]string // lower-case header name → replacement
	Fields   map[string]string // form field name → replacement
	JSONKeys map[string]string // object key, at any depth → replacement
	Patterns []Pattern
	Skips    []string // what Skip was told, in order
}

// Pattern is a text rule: every match of Re becomes Repl ($1… expand).
type Pattern struct {
	Re   *regexp.Regexp
	Repl string
}

// Pat returns a Pattern of an expression that must compile.
func Pat(expr, repl string) Pattern { return Pattern{regexp.MustCompile(expr), repl} }

func (r *Rules) Header(name string) (string, bool) {
	v, ok := r.Headers[strings.ToLower(name)]
	return v, ok
}

func (r *Rules) Field(name string) (string, bool) {
	v, ok := r.Fields[name]
	return v, ok
}

func (r *Rules) Text(v []byte) []byte {
	out := v
	for _, p := range r.Patterns {
		out = p.Re.ReplaceAll(out, []byte(p.Repl))
	}
	if bytes.Equal(out, v) {
		return v
	}
	return out
}

func (r *Rules) JSON(doc []byte) []byte {
	if len(r.JSONKeys) == 0 {
		return doc
	}
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil || d.More() {
		return doc
	}
	changed := false
	var walk func(any) any
	walk = func(v any) any {
		switch o := v.(type) {
		case map[string]any:
			for k, c := range o {
				if repl, ok := r.JSONKeys[k]; ok {
					o[k], changed = repl, true
				} else {
					o[k] = walk(c)
				}
			}
		case []any:
			for i, c := range o {
				o[i] = walk(c)
			}
		}
		return v
	}
	v = walk(v)
	if !changed {
		return doc
	}
	out, err := json.Marshal(v)
	if err != nil {
		return doc
	}
	return out
}

func (r *Rules) Skip(why string) { r.Skips = append(r.Skips, why) }

// MaskCase is one masking a Masker must do.
type MaskCase struct {
	Name string
	Side wire.Side
	In   []byte
	// Want is the masked bytes (In when nothing is to change).
	Want []byte
	// Skips is how many values the masker reports it could not read.
	Skips int
}

// Masks runs a protocol's Masker over cases with rules: each gives Want,
// reports Skips skips, leaves its input as it was, returns the input
// itself when nothing changes, and changes nothing more when masked again
// (the cases' replacements match no rule); with rules that name nothing,
// every input comes back as itself.
func Masks(t *testing.T, m wire.Masker, rules func() *Rules, cases ...MaskCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			in := bytes.Clone(c.In)
			r := rules()
			out := m.Mask(c.Side, in, r)
			if !bytes.Equal(out, c.Want) {
				t.Fatalf("masked\n%q\nto\n%q\nwant\n%q", c.In, out, c.Want)
			}
			if !bytes.Equal(in, c.In) {
				t.Fatalf("the input was modified: %q", in)
			}
			if len(r.Skips) != c.Skips {
				t.Fatalf("skips %q, want %d", r.Skips, c.Skips)
			}
			if bytes.Equal(c.In, c.Want) && len(in) > 0 && &out[0] != &in[0] {
				t.Fatalf("nothing changed, but the masker returned a copy")
			}
			if again := m.Mask(c.Side, out, rules()); !bytes.Equal(again, out) {
				t.Fatalf("masking twice changed\n%q\nto\n%q", out, again)
			}
			if none := m.Mask(c.Side, in, &Rules{}); len(in) > 0 && (len(none) == 0 || &none[0] != &in[0]) {
				t.Fatalf("rules that name nothing changed %q to %q", in, none)
			}
		})
	}
}

// FuzzMasker fuzzes a Masker, seeded with the cases' inputs: it never
// panics and never modifies its input; with rules that name nothing it
// returns every input as it is; with rules, the masking of bytes well
// says are whole messages of side is whole messages too (well may be nil).
func FuzzMasker(f *testing.F, m wire.Masker, rules func() *Rules, well func(wire.Side, []byte) bool, cases ...MaskCase) {
	for _, c := range cases {
		f.Add(c.In, c.Side == wire.Server)
	}
	f.Fuzz(func(t *testing.T, b []byte, server bool) {
		side := wire.Client
		if server {
			side = wire.Server
		}
		in := bytes.Clone(b)
		if none := m.Mask(side, in, &Rules{}); !bytes.Equal(none, b) {
			t.Fatalf("rules that name nothing changed %q to %q", b, none)
		}
		out := m.Mask(side, in, rules())
		if !bytes.Equal(in, b) {
			t.Fatalf("the input was modified: %q", b)
		}
		if well != nil && well(side, b) && !well(side, out) {
			t.Fatalf("%s: whole messages %q masked to %q, which are not", side, b, out)
		}
	})
}

// Whole reports whether b is whole messages of side for p's framer.
func Whole(p wire.Protocol) func(wire.Side, []byte) bool {
	return func(side wire.Side, b []byte) bool {
		if len(b) == 0 {
			return true
		}
		_, left, err := frames(p.NewFramer(side, limit), b)
		return err == nil && left == 0
	}
}

package diff

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// RulesVersion is the version of the rules file format read and written by
// this package.
const RulesVersion = 1

// Scopes a rule may be limited to.
const (
	ScopeResponse   = "response"   // the inbound response of the service
	ScopeDownstream = "downstream" // the requests the service sent downstream
)

// Rule is one entry of a rules file. Exactly one of Ignore, IgnoreHeader,
// Unordered and Tolerance is set; API, Scope and Dst narrow where it
// applies (empty: everywhere).
//
// The rules file is JSON:
//
//	{"version": 1, "rules": [
//	  {"ignore": "body.items[*].ts"},
//	  {"ignore": "**.id", "api": "POST /orders*"},
//	  {"ignore_header": "X-Request-*"},
//	  {"unordered": "body.items", "key": "sku"},
//	  {"tolerance": "body.total", "abs": 0.01},
//	  {"ignore": "body.request_id", "scope": "downstream", "dst": "127.0.0.1:9000"}
//	]}
type Rule struct {
	// API is a glob ('*' any run of characters, '?' one) matched against
	// the API name of a session, "METHOD /path" with id-like path segments
	// replaced by {id}. Empty: every API.
	API string `json:"api,omitempty"`
	// Scope is "response", "downstream" or empty for both.
	Scope string `json:"scope,omitempty"`
	// Dst is a glob matched against the destination (host:port) of a
	// downstream call; only with scope "downstream".
	Dst string `json:"dst,omitempty"`

	// Ignore is a path pattern (see ParsePattern); matching values and
	// everything below them are not compared.
	Ignore string `json:"ignore,omitempty"`
	// IgnoreHeader is a header name glob, case-insensitive.
	IgnoreHeader string `json:"ignore_header,omitempty"`
	// Unordered is a path pattern of arrays compared as multisets; with
	// Key, elements (objects) are paired by the value of that field.
	Unordered string `json:"unordered,omitempty"`
	Key       string `json:"key,omitempty"`
	// Tolerance is a path pattern of numbers that are equal when they
	// differ by at most Abs, or by at most Rel times the larger magnitude.
	Tolerance string  `json:"tolerance,omitempty"`
	Abs       float64 `json:"abs,omitempty"`
	Rel       float64 `json:"rel,omitempty"`

	// Comment is free text for people; noise detection says where a rule
	// came from.
	Comment string `json:"comment,omitempty"`
}

// RulesFile is the document stored in a rules file.
type RulesFile struct {
	Version int    `json:"version"`
	Rules   []Rule `json:"rules"`
}

// defaultIgnoredHeaders are never compared: they describe the transfer, not
// the content (bodies are compared after decoding), or change every time.
var defaultIgnoredHeaders = []string{"date", "content-length", "transfer-encoding", "connection",
	"keep-alive", "content-encoding", "retrace-*"}

type compiledRule struct {
	Rule
	api, dst  string
	pattern   *Pattern // Ignore, Unordered or Tolerance
	headerPat string   // IgnoreHeader, lower case
}

// Rules is a compiled set of rules, safe for concurrent use. The zero value
// and nil compare everything (except the default ignored headers).
type Rules struct {
	rules []compiledRule

	mu    sync.Mutex
	views map[string]*view // per api/scope/dst; bounded by maxViews
}

const maxViews = 4096

// view is the subset of rules that applies to one API, scope and
// destination.
type view struct {
	ignore    []*Pattern
	headers   []string
	unordered []unorderedRule
	tolerance []toleranceRule
}

type unorderedRule struct {
	pat *Pattern
	key string
}

type toleranceRule struct {
	pat      *Pattern
	abs, rel float64
}

// LoadRules reads and compiles a rules file.
func LoadRules(path string) (*Rules, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rules file: %w", err)
	}
	return ParseRules(path, data)
}

// RulesError is a problem in a rules file, with its position.
type RulesError struct {
	File string // as given to ParseRules
	Line int    // 1-based; 0 when unknown
	Col  int
	Msg  string
}

func (e *RulesError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
}

func posErr(name string, data []byte, off int64, format string, args ...any) *RulesError {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	col := int(off) - bytes.LastIndexByte(data[:off], '\n')
	return &RulesError{File: name, Line: line, Col: col, Msg: fmt.Sprintf(format, args...)}
}

// ParseRules compiles the rules file data; name is used in errors, which
// carry the line and column of the bad rule and name its field.
func ParseRules(name string, data []byte) (*Rules, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	jsonErr := func(err error) error {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return posErr(name, data, max(se.Offset-1, 0), "%v", se) // Offset is just past the bad byte
		case errors.As(err, &te):
			return posErr(name, data, te.Offset, "field %q: %v", te.Field, te)
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return posErr(name, data, int64(len(data)), "unexpected end of file")
		}
		return posErr(name, data, dec.InputOffset(), "%v", err)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, jsonErr(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, posErr(name, data, 0, `want a JSON object {"version":1,"rules":[...]}`)
	}
	version := 0
	var rules []compiledRule
	sawRules := false
	for dec.More() {
		keyOff := skipSpace(data, dec.InputOffset())
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonErr(err)
		}
		key, _ := tok.(string)
		switch key {
		case "version":
			if err := dec.Decode(&version); err != nil {
				return nil, jsonErr(err)
			}
			if version != RulesVersion {
				return nil, posErr(name, data, keyOff, "unsupported version %d (want %d)", version, RulesVersion)
			}
		case "rules":
			sawRules = true
			tok, err := dec.Token()
			if err != nil {
				return nil, jsonErr(err)
			}
			if d, ok := tok.(json.Delim); !ok || d != '[' {
				return nil, posErr(name, data, keyOff, `"rules" must be an array`)
			}
			for i := 0; dec.More(); i++ {
				off := skipSpace(data, dec.InputOffset())
				var raw json.RawMessage
				if err := dec.Decode(&raw); err != nil {
					return nil, jsonErr(err)
				}
				rd := json.NewDecoder(bytes.NewReader(raw))
				rd.DisallowUnknownFields()
				var r Rule
				if err := rd.Decode(&r); err != nil {
					return nil, posErr(name, data, off, "rules[%d]: %v", i, strings.TrimPrefix(err.Error(), "json: "))
				}
				c, err := compileRule(r)
				if err != nil {
					return nil, posErr(name, data, off, "rules[%d]: %v", i, err)
				}
				rules = append(rules, c)
			}
			if _, err := dec.Token(); err != nil {
				return nil, jsonErr(err)
			}
		default:
			return nil, posErr(name, data, keyOff, "unknown field %q (want \"version\" and \"rules\")", key)
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, jsonErr(err)
	}
	if version == 0 {
		return nil, &RulesError{File: name, Msg: `missing "version": 1`}
	}
	if !sawRules {
		return nil, &RulesError{File: name, Msg: `missing "rules"`}
	}
	return &Rules{rules: rules}, nil
}

// skipSpace returns the offset of the first byte at or after off that is
// not JSON white space or a separator, so errors point at the rule itself.
func skipSpace(data []byte, off int64) int64 {
	for off < int64(len(data)) {
		switch data[off] {
		case ' ', '\t', '\r', '\n', ',', ':':
			off++
		default:
			return off
		}
	}
	return off
}

// NewRules compiles rules given in code (for example the output of noise
// detection). The error names the index and field of the first bad rule.
func NewRules(rules ...Rule) (*Rules, error) {
	out := &Rules{}
	for i, r := range rules {
		c, err := compileRule(r)
		if err != nil {
			return nil, fmt.Errorf("rules[%d]: %w", i, err)
		}
		out.rules = append(out.rules, c)
	}
	return out, nil
}

func compileRule(r Rule) (compiledRule, error) {
	c := compiledRule{Rule: r, api: r.API, dst: r.Dst}
	n := 0
	for _, s := range []string{r.Ignore, r.IgnoreHeader, r.Unordered, r.Tolerance} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		return c, errors.New(`a rule needs exactly one of "ignore", "ignore_header", "unordered", "tolerance"`)
	}
	switch r.Scope {
	case "", ScopeResponse, ScopeDownstream:
	default:
		return c, fmt.Errorf(`"scope": %q is not "response" or "downstream"`, r.Scope)
	}
	if r.Dst != "" && r.Scope != ScopeDownstream {
		return c, errors.New(`"dst" needs "scope": "downstream"`)
	}
	if r.Key != "" && r.Unordered == "" {
		return c, errors.New(`"key" is only valid with "unordered"`)
	}
	if (r.Abs != 0 || r.Rel != 0) && r.Tolerance == "" {
		return c, errors.New(`"abs" and "rel" are only valid with "tolerance"`)
	}
	var field, pat string
	switch {
	case r.Ignore != "":
		field, pat = "ignore", r.Ignore
	case r.Unordered != "":
		field, pat = "unordered", r.Unordered
	case r.Tolerance != "":
		field, pat = "tolerance", r.Tolerance
		if r.Abs < 0 || r.Rel < 0 {
			return c, errors.New(`"abs" and "rel" must not be negative`)
		}
		if r.Abs == 0 && r.Rel == 0 {
			return c, errors.New(`"tolerance" needs "abs" or "rel" greater than 0`)
		}
	case r.IgnoreHeader != "":
		c.headerPat = strings.ToLower(r.IgnoreHeader)
		return c, nil
	}
	p, err := ParsePattern(pat)
	if err != nil {
		return c, fmt.Errorf("%q: %w", field, err)
	}
	c.pattern = p
	return c, nil
}

// Len returns the number of rules.
func (r *Rules) Len() int {
	if r == nil {
		return 0
	}
	return len(r.rules)
}

// List returns the rules as written.
func (r *Rules) List() []Rule {
	if r == nil {
		return nil
	}
	out := make([]Rule, len(r.rules))
	for i, c := range r.rules {
		out[i] = c.Rule
	}
	return out
}

// With returns a new rule set holding the rules of r followed by more.
func (r *Rules) With(more *Rules) *Rules {
	out := &Rules{}
	if r != nil {
		out.rules = append(out.rules, r.rules...)
	}
	if more != nil {
		out.rules = append(out.rules, more.rules...)
	}
	return out
}

// WriteRules writes rules as a rules file, one rule per line.
func WriteRules(w io.Writer, rules []Rule) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "{\"version\": %d, \"rules\": [\n", RulesVersion)
	for i, r := range rules {
		j, err := json.Marshal(r)
		if err != nil {
			return err
		}
		b.WriteString("  ")
		b.Write(j)
		if i < len(rules)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("]}\n")
	_, err := w.Write(b.Bytes())
	return err
}

// view returns the rules that apply to api in scope (and, downstream, to
// destination dst).
func (r *Rules) view(api, scope, dst string) *view {
	if r == nil {
		return &view{headers: defaultIgnoredHeaders}
	}
	k := api + "\x00" + scope + "\x00" + dst
	r.mu.Lock()
	v, ok := r.views[k]
	r.mu.Unlock()
	if ok {
		return v
	}
	v = &view{headers: append([]string(nil), defaultIgnoredHeaders...)}
	for _, c := range r.rules {
		if c.Scope != "" && c.Scope != scope {
			continue
		}
		if c.api != "" && !Glob(c.api, api) {
			continue
		}
		if c.dst != "" && !Glob(c.dst, dst) {
			continue
		}
		switch {
		case c.Ignore != "":
			v.ignore = append(v.ignore, c.pattern)
		case c.IgnoreHeader != "":
			v.headers = append(v.headers, c.headerPat)
		case c.Unordered != "":
			v.unordered = append(v.unordered, unorderedRule{c.pattern, c.Key})
		case c.Tolerance != "":
			v.tolerance = append(v.tolerance, toleranceRule{c.pattern, c.Abs, c.Rel})
		}
	}
	r.mu.Lock()
	if r.views == nil {
		r.views = map[string]*view{}
	}
	if len(r.views) < maxViews {
		r.views[k] = v
	}
	r.mu.Unlock()
	return v
}

// Ignores reports whether the rendered path is ignored for api in scope
// (and destination dst, downstream).
func (r *Rules) Ignores(api, scope, dst, path string) bool {
	v := r.view(api, scope, dst)
	for _, p := range v.ignore {
		if p.MatchPath(path) {
			return true
		}
	}
	return false
}

func (v *view) ignored(path []segment) bool {
	for _, p := range v.ignore {
		if p.match(path) {
			return true
		}
	}
	return false
}

func (v *view) headerIgnored(name string) bool {
	l := strings.ToLower(name)
	for _, g := range v.headers {
		if Glob(g, l) {
			return true
		}
	}
	return false
}

// Glob reports whether s matches pattern, in which '*' matches any run of
// characters (also '/') and '?' any one byte.
func Glob(pattern, s string) bool {
	// Iterative matcher with one backtrack point: linear for patterns
	// with any number of stars.
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == s[i]):
			p++
			i++
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

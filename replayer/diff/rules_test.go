package diff

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseRules(t *testing.T) {
	src := `{"version": 1, "rules": [
  {"ignore": "body.items[*].ts", "comment": "clock"},
  {"ignore": "**.id", "api": "POST /orders*"},
  {"ignore_header": "X-Request-*"},
  {"unordered": "body.items", "key": "sku"},
  {"tolerance": "body.total", "abs": 0.01},
  {"ignore": "body.request_id", "scope": "downstream", "dst": "127.0.0.1:*"}
]}`
	r, err := ParseRules("rules.json", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 6 {
		t.Fatalf("got %d rules", r.Len())
	}
	var buf bytes.Buffer
	if err := WriteRules(&buf, r.List()); err != nil {
		t.Fatal(err)
	}
	r2, err := ParseRules("written", buf.Bytes())
	if err != nil {
		t.Fatalf("written rules do not parse: %v\n%s", err, buf.String())
	}
	if len(r2.List()) != 6 || r2.List()[5] != r.List()[5] {
		t.Errorf("round trip changed rules: %v", r2.List())
	}
}

func TestParseRulesErrors(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"not json", `ignore body.ts`, "r.json:1:1: invalid character"},
		{"array", `[]`, `r.json:1:1: want a JSON object`},
		{"no version", `{"rules":[]}`, `r.json: missing "version": 1`},
		{"bad version", `{"version":2,"rules":[]}`, `r.json:1:2: unsupported version 2`},
		{"no rules", `{"version":1}`, `r.json: missing "rules"`},
		{"unknown top", `{"version":1,"rulez":[]}`, `r.json:1:14: unknown field "rulez"`},
		{"rules not array", `{"version":1,"rules":{}}`, `r.json:1:14: "rules" must be an array`},
		{"unknown field", "{\"version\":1,\"rules\":[\n  {\"ignore\":\"a\"},\n  {\"igonre\":\"body.ts\"}\n]}", `r.json:3:3: rules[1]: unknown field "igonre"`},
		{"two actions", "{\"version\":1,\"rules\":[\n{\"ignore\":\"a\",\"unordered\":\"b\"}]}", `r.json:2:1: rules[0]: a rule needs exactly one of`},
		{"no action", `{"version":1,"rules":[{"api":"GET /"}]}`, `rules[0]: a rule needs exactly one of`},
		{"bad pattern", "{\"version\":1,\"rules\":[\n\n    {\"ignore\":\"body.items[\"}]}", `r.json:3:5: rules[0]: "ignore": path pattern "body.items[": unclosed '['`},
		{"bad index", `{"version":1,"rules":[{"unordered":"body[x]"}]}`, `"unordered": path pattern "body[x]": index "x"`},
		{"bad scope", `{"version":1,"rules":[{"ignore":"a","scope":"up"}]}`, `"scope": "up" is not`},
		{"dst without scope", `{"version":1,"rules":[{"ignore":"a","dst":"x:1"}]}`, `"dst" needs "scope": "downstream"`},
		{"key without unordered", `{"version":1,"rules":[{"ignore":"a","key":"id"}]}`, `"key" is only valid with "unordered"`},
		{"abs without tolerance", `{"version":1,"rules":[{"ignore":"a","abs":1}]}`, `"abs" and "rel" are only valid`},
		{"zero tolerance", `{"version":1,"rules":[{"tolerance":"a"}]}`, `needs "abs" or "rel"`},
		{"negative tolerance", `{"version":1,"rules":[{"tolerance":"a","abs":-1}]}`, `must not be negative`},
		{"wrong type", `{"version":1,"rules":[{"ignore":1}]}`, `rules[0]: cannot unmarshal number into Go struct field Rule.ignore of type string`},
		{"truncated", `{"version":1,"rules":[{"ignore":"a"}`, `unexpected end of file`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRules("r.json", []byte(tc.src))
			if err == nil {
				t.Fatal("no error")
			}
			var re *RulesError
			if !errors.As(err, &re) {
				t.Errorf("error %T is not a *RulesError", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestLoadRules(t *testing.T) {
	if _, err := LoadRules(filepath.Join(t.TempDir(), "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("error %v does not name the file", err)
	}
	p := filepath.Join(t.TempDir(), "r.json")
	os.WriteFile(p, []byte(`{"version":1,"rules":[{"ignore":"x["}]}`), 0o644)
	if _, err := LoadRules(p); err == nil || !strings.HasPrefix(err.Error(), p+":1:23:") {
		t.Errorf("error %v does not start with %s:1:23:", err, p)
	}
}

func TestNewRulesError(t *testing.T) {
	_, err := NewRules(Rule{Ignore: "a"}, Rule{Ignore: "b["})
	if err == nil || !strings.HasPrefix(err.Error(), `rules[1]: "ignore"`) {
		t.Errorf("got %v", err)
	}
}

package prepare

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/retrace-dev/retrace/replayer/load"
)

// View is what a template sees: the request and helpers to take it apart.
type View struct{ r *load.Request }

// At is the recorded time of the request.
func (v *View) At() time.Time { return v.r.At }

// API is the request's API name (explicit or derived).
func (v *View) API() string { return v.r.APIName() }

// ID is the request's source id.
func (v *View) ID() string { return v.r.ID }

// Kind is "http" or "sql".
func (v *View) Kind() string { return v.r.EffectiveKind() }

// Method is the HTTP method (GET when empty).
func (v *View) Method() string { return v.r.HTTPMethod() }

// URL is the request URL as recorded.
func (v *View) URL() string { return v.r.URL }

// Path is the URL's path.
func (v *View) Path() string {
	u, err := url.Parse(v.r.URL)
	if err != nil {
		return ""
	}
	return u.Path
}

// Param is the first value of the URL query parameter name ("" if absent).
func (v *View) Param(name string) string {
	u, err := url.Parse(v.r.URL)
	if err != nil {
		return ""
	}
	return u.Query().Get(name)
}

// Params is every URL query parameter.
func (v *View) Params() url.Values {
	u, err := url.Parse(v.r.URL)
	if err != nil {
		return url.Values{}
	}
	return u.Query()
}

// Segment is the i-th segment of the path, from 0 ("/orders/17": 0 is
// "orders", 1 is "17"); "" when there are fewer.
func (v *View) Segment(i int) string {
	segs := strings.Split(strings.Trim(v.Path(), "/"), "/")
	if i < 0 || i >= len(segs) {
		return ""
	}
	return segs[i]
}

// Header is the first value of the header name.
func (v *View) Header(name string) string { return v.r.Header.Get(name) }

// Body is the body as text.
func (v *View) Body() string { return string(v.r.Body) }

// JSON is the body decoded as JSON (numbers as json.Number, so they print
// as written); nil when the body is not JSON.
func (v *View) JSON() any {
	dec := json.NewDecoder(strings.NewReader(string(v.r.Body)))
	dec.UseNumber()
	var x any
	if dec.Decode(&x) != nil {
		return nil
	}
	return x
}

// Query is the request's query text (a SQL request, or a query extracted
// from a log).
func (v *View) Query() string { return v.r.Query }

// Meta is the extracted log field name.
func (v *View) Meta(name string) string { return v.r.Meta[name] }

// Funcs are the functions templates may call besides text/template's
// built-ins:
//
//	sqlstr   a MySQL string literal: sqlstr "it's" → 'it\'s'
//	sqlnum   its argument if it is a number, else an error (no injection)
//	sqlident a backquoted identifier
//	json     JSON encoding of any value
//	lower, upper, trim, replace OLD NEW S, split SEP S, join SEP LIST,
//	default DEFAULT VALUE (DEFAULT when VALUE is empty)
func Funcs() template.FuncMap {
	return template.FuncMap{
		"sqlstr":   sqlString,
		"sqlnum":   sqlNumber,
		"sqlident": func(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" },
		"json": func(v any) (string, error) {
			b, err := json.Marshal(v)
			return string(b), err
		},
		"lower":   strings.ToLower,
		"upper":   strings.ToUpper,
		"trim":    strings.TrimSpace,
		"replace": func(old, new, s string) string { return strings.ReplaceAll(s, old, new) },
		"split":   func(sep, s string) []string { return strings.Split(s, sep) },
		"join":    func(sep string, l []string) string { return strings.Join(l, sep) },
		"default": func(def string, v any) string {
			if s := fmt.Sprint(v); v != nil && s != "" {
				return s
			}
			return def
		},
	}
}

func sqlString(v any) string {
	s := fmt.Sprint(v)
	var b strings.Builder
	b.WriteByte('\'')
	for _, c := range []byte(s) {
		switch c {
		case '\'':
			b.WriteString(`\'`)
		case '\\':
			b.WriteString(`\\`)
		case 0:
			b.WriteString(`\0`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case 0x1a:
			b.WriteString(`\Z`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

func sqlNumber(v any) (string, error) {
	s := strings.TrimSpace(fmt.Sprint(v))
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || strings.ContainsAny(s, "xXpP_") {
		return "", fmt.Errorf("%q is not a number", s)
	}
	return s, nil
}

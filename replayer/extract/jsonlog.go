package extract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/retrace-dev/retrace/replayer/load"
)

// JSONFields names the fields of a JSONL log that make a request. A name may
// be a dotted path into nested objects ("request.method"). Empty names are
// not read, except Time, which is required.
type JSONFields struct {
	Time    string // when the request happened; default "time"
	Method  string // default "method" (missing: GET)
	URL     string // path with query, or absolute URL; default "url"
	Headers string // object of string or string-array values; default "headers"
	Body    string // string (or any JSON value, kept as its JSON text); default "body"
	Query   string // a query text (SQL, or a query language for the prepare step); default "query"
	API     string // the API name; default none (derived from method and path)
	ID      string // a request id; default none (file:line)
	// Meta copies further fields into Request.Meta: name → path.
	Meta map[string]string
	// TimeFormat: "auto" (default: RFC 3339 strings, "2006-01-02
	// 15:04:05[.999]" strings in UTC, Unix numbers in s, ms, µs or ns chosen by
	// magnitude), "unix", "unix_ms", "unix_us", "unix_ns", or a Go time
	// layout.
	TimeFormat string
}

// DefaultJSONFields are the field names used when none are given.
func DefaultJSONFields() JSONFields {
	return JSONFields{Time: "time", Method: "method", URL: "url", Headers: "headers", Body: "body", Query: "query"}
}

// JSONLineParser returns the parser of JSONL log lines with fields f.
func JSONLineParser(f JSONFields) LineParser {
	if f.Time == "" {
		f.Time = "time"
	}
	return func(line []byte, name string, lineNo int) (*load.Request, error) {
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.UseNumber()
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			return nil, fmt.Errorf("not a JSON object: %w", err)
		}
		tv, ok := lookup(obj, f.Time)
		if !ok {
			return nil, fmt.Errorf("no time field %q", f.Time)
		}
		at, err := ParseTime(tv, f.TimeFormat)
		if err != nil {
			return nil, fmt.Errorf("field %q: %w", f.Time, err)
		}
		req := &load.Request{At: at, ID: fmt.Sprintf("%s:%d", name, lineNo)}
		str := func(path string) (string, error) {
			v, ok := lookup(obj, path)
			if !ok || v == nil {
				return "", nil
			}
			switch x := v.(type) {
			case string:
				return x, nil
			case json.Number:
				return x.String(), nil
			case bool:
				return strconv.FormatBool(x), nil
			}
			b, err := json.Marshal(v)
			return string(b), err
		}
		for _, fld := range []struct {
			path string
			dst  *string
		}{{f.Method, &req.Method}, {f.URL, &req.URL}, {f.Query, &req.Query}, {f.API, &req.API}, {f.ID, &req.ID}} {
			if fld.path == "" {
				continue
			}
			s, err := str(fld.path)
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", fld.path, err)
			}
			if s != "" {
				*fld.dst = s
			}
		}
		if f.Body != "" {
			if body, err := str(f.Body); err != nil {
				return nil, fmt.Errorf("field %q: %w", f.Body, err)
			} else if body != "" {
				req.Body = []byte(body)
			}
		}
		if f.Headers != "" {
			if hv, ok := lookup(obj, f.Headers); ok && hv != nil {
				h, err := headers(hv)
				if err != nil {
					return nil, fmt.Errorf("field %q: %w", f.Headers, err)
				}
				req.Header = h
			}
		}
		for name, path := range f.Meta {
			s, err := str(path)
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", path, err)
			}
			if req.Meta == nil {
				req.Meta = map[string]string{}
			}
			req.Meta[name] = s
		}
		if req.URL == "" && req.Query == "" {
			return nil, fmt.Errorf("neither url field %q nor query field %q is set", f.URL, f.Query)
		}
		if req.URL != "" {
			req.Kind = load.KindHTTP
		} else {
			req.Kind = load.KindSQL
		}
		return req, nil
	}
}

func lookup(obj map[string]any, path string) (any, bool) {
	if v, ok := obj[path]; ok { // a key that itself has dots
		return v, true
	}
	var cur any = obj
	for _, p := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func headers(v any) (map[string][]string, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("headers are not an object")
	}
	h := make(map[string][]string, len(m))
	for k, x := range m {
		switch y := x.(type) {
		case string:
			h[k] = []string{y}
		case json.Number:
			h[k] = []string{y.String()}
		case []any:
			for _, e := range y {
				s, ok := e.(string)
				if !ok {
					return nil, fmt.Errorf("header %q has a non-string value", k)
				}
				h[k] = append(h[k], s)
			}
		default:
			return nil, fmt.Errorf("header %q is neither a string nor an array of strings", k)
		}
	}
	return h, nil
}

// ParseTime reads a timestamp value (a JSON string or number) in format
// (see JSONFields.TimeFormat).
func ParseTime(v any, format string) (time.Time, error) {
	var s string
	var num json.Number
	switch x := v.(type) {
	case string:
		s = x
	case json.Number:
		num = x
	case float64:
		num = json.Number(strconv.FormatFloat(x, 'f', -1, 64))
	default:
		return time.Time{}, fmt.Errorf("time %v is neither a string nor a number", v)
	}
	switch format {
	case "", "auto":
		if num == "" {
			if _, err := strconv.ParseFloat(s, 64); err == nil {
				num = json.Number(s)
			}
		}
		if num != "" {
			f, err := num.Float64()
			if err != nil {
				return time.Time{}, fmt.Errorf("bad time %q", num)
			}
			switch a := math.Abs(f); {
			case a >= 1e17:
				return unix(num, time.Nanosecond)
			case a >= 1e14:
				return unix(num, time.Microsecond)
			case a >= 1e11:
				return unix(num, time.Millisecond)
			default:
				return unix(num, time.Second)
			}
		}
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999", accessTimeLayout} {
			if t, err := time.Parse(layout, s); err == nil {
				return t, nil
			}
		}
		return time.Time{}, fmt.Errorf("time %q is in no known format (use --time-format)", s)
	case "unix", "unix_ms", "unix_us", "unix_ns":
		if num == "" {
			num = json.Number(s)
		}
		unit := map[string]time.Duration{"unix": time.Second, "unix_ms": time.Millisecond, "unix_us": time.Microsecond, "unix_ns": time.Nanosecond}[format]
		return unix(num, unit)
	default:
		if num != "" {
			return time.Time{}, fmt.Errorf("time %s is a number, want a string in layout %q", num, format)
		}
		t, err := time.Parse(format, s)
		if err != nil {
			return time.Time{}, fmt.Errorf("time %q does not match layout %q", s, format)
		}
		return t, nil
	}
}

// unix converts a decimal number of units since the epoch, keeping the
// integer part exact (float64 would round nanoseconds).
func unix(num json.Number, unit time.Duration) (time.Time, error) {
	s := string(num)
	intPart, frac, _ := strings.Cut(s, ".")
	i, err := strconv.ParseInt(intPart, 10, 64)
	if err != nil || strings.ContainsAny(s, "eE") {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > float64(math.MaxInt64)/float64(unit) {
			return time.Time{}, fmt.Errorf("bad unix time %q", s)
		}
		return time.Unix(0, int64(f*float64(unit))).UTC(), nil
	}
	if i > math.MaxInt64/int64(unit) || i < math.MinInt64/int64(unit) {
		return time.Time{}, fmt.Errorf("unix time %q out of range", s)
	}
	ns := i * int64(unit)
	if frac != "" {
		f, err := strconv.ParseFloat("0."+frac, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("bad unix time %q", s)
		}
		if i < 0 {
			f = -f
		}
		ns += int64(f * float64(unit))
	}
	return time.Unix(0, ns).UTC(), nil
}

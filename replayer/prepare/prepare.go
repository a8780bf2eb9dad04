// Package prepare is the second step of the load pipeline: it turns each
// timed request into what the target executes — as is, rewritten by a Go
// text/template (a V1 query turned into SQL, a path moved to /v2), or with
// its Host and headers rewritten — reading and writing timed-request JSONL
// (package load).
//
// A template sees the request as a [View] and renders either
//   - nothing (only white space): the request is dropped;
//   - a JSON object: its fields replace the request's ("url", "method",
//     "header", "body", "query", "args", "kind", "api", "meta"); setting
//     "query" without "url" makes a SQL request, and the reverse an HTTP one;
//   - any other text: the SQL query to run instead of the request.
//
// The API name of the original request is kept unless the template sets
// "api", so that the same traffic prepared two ways (V1 and V2) is compared
// API by API in the analyze step.
package prepare

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/template"

	"github.com/retrace-dev/retrace/replayer/load"
)

// Config says how requests are prepared. The zero value passes them as is.
type Config struct {
	// Template is the text of a text/template rendered for every request
	// (see the package documentation); empty means none.
	Template string
	// TemplateName names it in error messages (the file name).
	TemplateName string
	// Host, when set, becomes the Host header of HTTP requests.
	Host string
	// SetHeaders replace (or add) headers of HTTP requests.
	SetHeaders http.Header
	// DropHeaders are removed from HTTP requests.
	DropHeaders []string
}

// Preparer applies a Config to requests. It is safe for concurrent use.
type Preparer struct {
	cfg  Config
	tmpl *template.Template
}

// New checks cfg and parses its template.
func New(cfg Config) (*Preparer, error) {
	p := &Preparer{cfg: cfg}
	if cfg.Template != "" {
		name := cfg.TemplateName
		if name == "" {
			name = "template"
		}
		t, err := template.New(name).Funcs(Funcs()).Option("missingkey=error").Parse(cfg.Template)
		if err != nil {
			return nil, fmt.Errorf("template: %w", err)
		}
		p.tmpl = t
	}
	return p, nil
}

// Prepare returns the request to execute for r; keep is false when the
// template dropped it.
func (p *Preparer) Prepare(r *load.Request) (out *load.Request, keep bool, err error) {
	out = r
	if p.tmpl != nil {
		var buf bytes.Buffer
		if err := p.tmpl.Execute(&buf, &View{r: r}); err != nil {
			return nil, false, err
		}
		text := bytes.TrimSpace(buf.Bytes())
		if len(text) == 0 {
			return nil, false, nil
		}
		if out, err = apply(r, text); err != nil {
			return nil, false, err
		}
	}
	if out.EffectiveKind() == load.KindHTTP && (p.cfg.Host != "" || len(p.cfg.SetHeaders) > 0 || len(p.cfg.DropHeaders) > 0) {
		c := *out
		c.Header = out.Header.Clone()
		if c.Header == nil {
			c.Header = http.Header{}
		}
		for _, k := range p.cfg.DropHeaders {
			c.Header.Del(k)
		}
		for k, v := range p.cfg.SetHeaders {
			c.Header[http.CanonicalHeaderKey(k)] = v
		}
		if p.cfg.Host != "" {
			c.Header.Set("Host", p.cfg.Host)
			if u, err := url.Parse(c.URL); err == nil && u.Host != "" {
				u.Host = p.cfg.Host
				c.URL = u.String()
			}
		}
		if len(c.Header) == 0 {
			c.Header = nil
		}
		out = &c
	}
	return out, true, out.Validate()
}

// apply turns the template's output into the prepared request.
func apply(r *load.Request, text []byte) (*load.Request, error) {
	api := r.APIName()
	if text[0] != '{' {
		return &load.Request{At: r.At, API: api, ID: r.ID, Kind: load.KindSQL, Query: string(text), Meta: r.Meta}, nil
	}
	var over map[string]json.RawMessage
	if err := json.Unmarshal(text, &over); err != nil {
		return nil, fmt.Errorf("template output is not a JSON object: %w (output: %.200s)", err, text)
	}
	base, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	var merged map[string]json.RawMessage
	if err := json.Unmarshal(base, &merged); err != nil {
		return nil, err
	}
	_, setsQuery := over["query"]
	_, setsURL := over["url"]
	_, setsKind := over["kind"]
	switch {
	case setsKind:
	case setsQuery && !setsURL:
		for _, k := range []string{"url", "method", "header", "body", "body_b64"} {
			delete(merged, k)
		}
		merged["kind"] = json.RawMessage(`"sql"`)
	case setsURL && !setsQuery:
		delete(merged, "query")
		delete(merged, "args")
		merged["kind"] = json.RawMessage(`"http"`)
	}
	if _, ok := over["body"]; ok {
		delete(merged, "body_b64")
	}
	if _, ok := over["api"]; !ok {
		merged["api"], _ = json.Marshal(api)
	}
	for k, v := range over {
		if k == "v" {
			continue
		}
		merged[k] = v
	}
	b, err := json.Marshal(merged)
	if err != nil {
		return nil, err
	}
	var out load.Request
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("template output: %w", err)
	}
	return &out, nil
}

// Stats count what Run did.
type Stats struct {
	Read    int64
	Written int64
	Dropped int64 // the template rendered nothing
	Bad     int64 // input lines that did not decode
	Failed  int64 // requests the template or a rewrite failed on
}

// Run prepares every request of rd into w. Bad input lines and requests the
// preparation fails on are reported to onBad (with their line numbers) and
// skipped.
func Run(ctx context.Context, p *Preparer, rd *load.Reader, w *load.Writer, onBad func(error)) (Stats, error) {
	var st Stats
	if onBad == nil {
		onBad = func(error) {}
	}
	for {
		var r load.Request
		err := rd.Next(&r)
		if errors.Is(err, io.EOF) {
			break
		}
		var le *load.LineError
		if errors.As(err, &le) {
			st.Bad++
			onBad(le)
			continue
		}
		if err != nil {
			return st, err
		}
		st.Read++
		if st.Read%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return st, err
			}
		}
		out, keep, err := p.Prepare(&r)
		if err != nil {
			st.Failed++
			onBad(fmt.Errorf("line %d: %w", rd.Line(), err))
			continue
		}
		if !keep {
			st.Dropped++
			continue
		}
		if err := w.Write(out); err != nil {
			return st, err
		}
		st.Written++
	}
	return st, w.Flush()
}

// ParseHeader parses "Name: value" (a --header flag).
func ParseHeader(s string) (string, string, error) {
	k, v, ok := strings.Cut(s, ":")
	k = strings.TrimSpace(k)
	if !ok || k == "" || strings.ContainsAny(k, " \t") {
		return "", "", fmt.Errorf("bad header %q (want \"Name: value\")", s)
	}
	return k, strings.TrimSpace(v), nil
}

package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/retrace-dev/retrace/replayer/diff"
	"github.com/retrace-dev/retrace/replayer/regress"
	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/http1"
	"github.com/retrace-dev/retrace/wire/http2"
	"github.com/retrace-dev/retrace/wire/protocols"
)

// The HTML report is one self-contained file: inline CSS and script, no
// external resource, so it opens offline and can be attached to a CI run.

type htmlData struct {
	S        *Summary
	Title    string
	Sessions []sessionView
	Noise    []diff.Rule
	AB       bool
}

type sessionView struct {
	ID, API, Trace string
	Findings       []findingView
	Preexisting    []findingView
	Request        template.HTML
	Columns        []msgView
	Calls          []callView
}

type findingView struct {
	Where, Path, Kind, Want, Got, Note string
}

type msgView struct {
	Title      string
	Decoded    template.HTML // HTTP/2 and gRPC: the decoded form, instead of status, headers and body
	Status     string
	StatusMark bool
	Headers    []headerView
	Body       template.HTML
	Note       string
}

type headerView struct {
	Name, Value string
	Mark        bool
}

type callView struct {
	Title    string
	Summary  string
	State    string // "same", "changed", "no recording", "never made"
	Diffs    []findingView
	Recorded template.HTML
	Replayed template.HTML
}

func findingViews(fs []regress.Finding) []findingView {
	out := make([]findingView, 0, len(fs))
	for _, f := range fs {
		where := f.Where
		if f.Call != nil {
			where = f.Call.String()
		}
		out = append(out, findingView{Where: where, Path: f.Path, Kind: string(f.Kind), Want: f.Want, Got: f.Got, Note: f.Note})
	}
	return out
}

func diffViews(ds []diff.Difference) []findingView {
	out := make([]findingView, 0, len(ds))
	for _, d := range ds {
		out = append(out, findingView{Path: d.Path, Kind: string(d.Kind), Want: d.Want, Got: d.Got, Note: d.Note})
	}
	return out
}

// marks are the paths to highlight on one side of a comparison, and the
// text lines (1-based) for text bodies.
type marks struct {
	paths map[string]bool
	lines map[int]bool
}

// sideMarks picks the differences visible on one side: the recorded side
// shows changed and removed values, the replayed side changed and added.
func sideMarks(ds []diff.Difference, recorded bool) marks {
	m := marks{paths: map[string]bool{}, lines: map[int]bool{}}
	for _, d := range ds {
		if d.Kind == diff.Changed || (recorded && d.Kind == diff.Removed) || (!recorded && d.Kind == diff.Added) {
			m.paths[d.Path] = true
			if d.Path == "body" && strings.HasPrefix(d.Note, "line ") {
				n, _ := strconv.Atoi(strings.Fields(strings.TrimPrefix(d.Note, "line "))[0])
				m.lines[n] = true
			}
		}
	}
	return m
}

// covers reports whether a field at path is marked: the path itself, or
// a value it is part of (a removed message marks every field in it).
func (m marks) covers(path string) bool {
	for p := len(path); p > 0; {
		if m.paths[path[:p]] {
			return true
		}
		i := strings.LastIndexAny(path[:p], ".[")
		if i <= 0 {
			return false
		}
		p = i
	}
	return false
}

func responseFindings(fs []regress.Finding) []diff.Difference {
	var out []diff.Difference
	for _, f := range fs {
		if f.Where == regress.InResponse {
			out = append(out, f.Difference)
		}
	}
	return out
}

// formOf shows an HTTP/2 or gRPC response in its decoded form.
func formOf(title string, d *wire.Decoded, m marks) msgView {
	if d == nil {
		return msgView{Title: title, Note: "no response"}
	}
	return msgView{Title: title, Decoded: renderDecoded(*d, m)}
}

func msgOf(title string, r *http1.ParsedResponse, m marks) msgView {
	if r == nil {
		return msgView{Title: title, Note: "no response"}
	}
	v := msgView{Title: title, Status: strconv.Itoa(r.Status) + " " + http.StatusText(r.Status), StatusMark: m.paths["status"]}
	v.Headers = headerViews(r.Header, m)
	v.Body = renderBody(r.Body, m)
	if r.Truncated {
		v.Note = "body truncated"
	}
	return v
}

func headerViews(h http.Header, m marks) []headerView {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []headerView
	for _, k := range names {
		out = append(out, headerView{Name: k, Value: strings.Join(h[k], ", "), Mark: m.paths[diff.JoinKey("header", k)]})
	}
	return out
}

// renderBody pretty-prints a JSON body with the marked paths highlighted,
// or shows text with the marked lines highlighted.
func renderBody(body []byte, m marks) template.HTML {
	var b strings.Builder
	if v, ok := decodeJSON(body); ok {
		renderJSON(&b, v, "body", 0, m)
		return template.HTML(b.String())
	}
	whole := m.paths["body"] && len(m.lines) == 0
	if whole {
		b.WriteString(`<mark data-path="body">`)
	}
	for i, line := range strings.Split(printable(body), "\n") {
		if m.lines[i+1] {
			b.WriteString(`<mark data-path="body">` + template.HTMLEscapeString(line) + "</mark>\n")
		} else {
			b.WriteString(template.HTMLEscapeString(line) + "\n")
		}
	}
	if whole {
		b.WriteString("</mark>")
	}
	return template.HTML(b.String())
}

func decodeJSON(b []byte) (any, bool) {
	t := bytes.TrimLeft(b, " \t\r\n")
	if len(t) == 0 || (t[0] != '{' && t[0] != '[') {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil || dec.More() {
		return nil, false
	}
	return v, true
}

func renderJSON(b *strings.Builder, v any, path string, depth int, m marks) {
	if m.paths[path] {
		fmt.Fprintf(b, `<mark data-path="%s">`, template.HTMLEscapeString(path))
		defer b.WriteString("</mark>")
	}
	ind := strings.Repeat("  ", depth+1)
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			b.WriteString("{}")
			return
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString("{\n")
		for i, k := range keys {
			kb, _ := json.Marshal(k)
			b.WriteString(ind + `<span class="k">` + template.HTMLEscapeString(string(kb)) + "</span>: ")
			renderJSON(b, x[k], diff.JoinKey(path, k), depth+1, m)
			if i < len(keys)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString(ind[2:] + "}")
	case []any:
		if len(x) == 0 {
			b.WriteString("[]")
			return
		}
		b.WriteString("[\n")
		for i, e := range x {
			b.WriteString(ind)
			renderJSON(b, e, diff.JoinIndex(path, i), depth+1, m)
			if i < len(x)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString(ind[2:] + "]")
	default:
		j, _ := json.Marshal(x)
		b.WriteString(template.HTMLEscapeString(string(j)))
	}
}

// printable shows bytes as text, with invalid UTF-8 and control bytes
// other than tab and newline escaped.
func printable(p []byte) string {
	var b strings.Builder
	for len(p) > 0 {
		r, n := utf8.DecodeRune(p)
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, p[0])
		case r == '\r':
			// CRLF shows as a line end
		case r < 0x20 && r != '\n' && r != '\t':
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
		p = p[n:]
	}
	return b.String()
}

// renderCall shows one downstream request: an HTTP request like a message
// (request line, headers, body with highlighted fields), anything else as
// escaped text, highlighted whole when it differs.
func renderCall(proto string, req []byte, m marks) template.HTML {
	if req == nil {
		return template.HTML(`<span class="none">(none)</span>`)
	}
	if proto == "http" {
		if r, err := http1.ParseRequest(req); err == nil {
			var b strings.Builder
			line := template.HTMLEscapeString(r.Method + " " + r.Target)
			if m.paths["method"] || m.paths["target"] {
				line = `<mark data-path="target">` + line + "</mark>"
			}
			b.WriteString(line + "\n")
			for _, h := range headerViews(r.Header, m) {
				s := template.HTMLEscapeString(h.Name + ": " + h.Value)
				if h.Mark {
					s = `<mark data-path="` + template.HTMLEscapeString(diff.JoinKey("header", h.Name)) + `">` + s + "</mark>"
				}
				b.WriteString(s + "\n")
			}
			b.WriteString("\n")
			b.WriteString(string(renderBody(r.Body, m)))
			return template.HTML(b.String())
		}
	}
	if proto == http2.GRPCName || proto == http2.Name {
		if msg, _, err := http2.ParseMessage(req); err == nil {
			return renderDecoded(http2.DecodeMessage(false, msg, nil, ""), m)
		}
	}
	if d, ok := protocols.All.For(proto).Decode(wire.Client, req); ok {
		return renderDecoded(d, m)
	}
	s := template.HTMLEscapeString(printable(req))
	if len(m.paths) > 0 {
		var ps []string
		for p := range m.paths {
			ps = append(ps, p)
		}
		sort.Strings(ps)
		s = `<mark data-path="` + template.HTMLEscapeString(strings.Join(ps, " ")) + `">` + s + "</mark>"
	}
	return template.HTML(s)
}

// renderDecoded shows a request in its protocol's decoded form (a Redis
// command line, a MySQL statement with its parameters) and its fields one
// per line, the fields a difference names highlighted.
func renderDecoded(d wire.Decoded, m marks) template.HTML {
	var b strings.Builder
	b.WriteString(template.HTMLEscapeString(d.Text))
	b.WriteString("\n")
	for _, f := range d.Fields {
		line := template.HTMLEscapeString(f.Path) + "  " + template.HTMLEscapeString(printable([]byte(f.Value)))
		if m.covers(f.Path) {
			line = `<mark data-path="` + template.HTMLEscapeString(f.Path) + `">` + line + "</mark>"
		}
		b.WriteString("\n" + line)
	}
	return template.HTML(b.String())
}

// inStartOrder returns a session's calls in the order they started: by
// their recorded call's start (Matched), a call without recording after
// the call that reached the mock server before it.
func inStartOrder(calls []regress.CallDetail) []regress.CallDetail {
	type keyed struct {
		key float64
		c   regress.CallDetail
	}
	ks := make([]keyed, len(calls))
	last := -1.0
	for i, c := range calls {
		switch {
		case c.Matched >= 0:
			ks[i].key = float64(c.Matched)
			if c.Seq >= 0 {
				last = ks[i].key
			}
		default:
			last += 1.0 / 1024
			ks[i].key = last
		}
		ks[i].c = c
	}
	sort.SliceStable(ks, func(i, j int) bool { return ks[i].key < ks[j].key })
	out := make([]regress.CallDetail, len(ks))
	for i := range ks {
		out[i] = ks[i].c
	}
	return out
}

func sessionViewOf(r *regress.Result, ab bool) sessionView {
	v := sessionView{ID: r.Name(), API: r.API, Trace: r.Trace, Findings: findingViews(r.Findings), Preexisting: findingViews(r.Preexisting)}
	d := r.Detail
	if d == nil {
		return v
	}
	v.Request = template.HTML(template.HTMLEscapeString(printable(d.Request)))
	resp := responseFindings(r.Findings)
	resp = append(resp, responseFindings(r.Preexisting)...)
	if d.RecordedForm != nil { // HTTP/2 or gRPC
		if d.RequestForm != nil {
			v.Request = renderDecoded(*d.RequestForm, marks{})
		}
		v.Columns = append(v.Columns, formOf("recorded", d.RecordedForm, sideMarks(resp, true)))
		v.Columns = append(v.Columns, formOf("replayed (candidate)", d.ReplayedForm, sideMarks(resp, false)))
		if ab {
			v.Columns = append(v.Columns, formOf("baseline", d.BaselineForm, marks{}))
		}
	} else {
		v.Columns = append(v.Columns, msgOf("recorded", d.Recorded, sideMarks(resp, true)))
		v.Columns = append(v.Columns, msgOf("replayed (candidate)", d.Replayed, sideMarks(resp, false)))
		if ab {
			v.Columns = append(v.Columns, msgOf("baseline", d.Baseline, marks{}))
		}
	}
	for _, c := range inStartOrder(d.Calls) {
		cv := callView{Title: c.CallRef.String(), Summary: c.Summary, Diffs: diffViews(c.Diffs)}
		switch {
		case c.Seq < 0:
			cv.State = "never made"
		case c.Recorded == nil:
			cv.State = "no recording"
		case len(c.Diffs) > 0:
			cv.State = "changed"
		default:
			cv.State = "same"
		}
		cv.Recorded = renderCall(c.Proto, c.Recorded, sideMarks(c.Diffs, true))
		cv.Replayed = renderCall(c.Proto, c.Replayed, sideMarks(c.Diffs, false))
		if c.RecordedForm != nil && c.Recorded != nil {
			cv.Recorded = renderDecoded(*c.RecordedForm, sideMarks(c.Diffs, true))
		}
		if c.ReplayedForm != nil && c.Replayed != nil {
			cv.Replayed = renderDecoded(*c.ReplayedForm, sideMarks(c.Diffs, false))
		}
		v.Calls = append(v.Calls, cv)
	}
	return v
}

func writeHTML(path string, s *Summary, details []*regress.Result, noise []diff.Rule) error {
	data := htmlData{S: s, Title: "retrace replay report", Noise: noise, AB: s.Mode == "ab"}
	for _, r := range details {
		data.Sessions = append(data.Sessions, sessionViewOf(r, data.AB))
	}
	var b bytes.Buffer
	if err := page.Execute(&b, data); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"pct": func(n, d int) string {
		if d == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(d))
	},
}).Parse(pageHTML))

const pageHTML = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d232a;background:#f6f7f9}
header{background:#1d232a;color:#fff;padding:16px 24px}
header h1{margin:0 0 4px;font-size:20px}
header .sub{color:#b8c0cc;font-size:13px}
main{padding:16px 24px}
.totals{display:flex;gap:12px;margin:8px 0 16px}
.tot{background:#fff;border-radius:6px;padding:10px 16px;box-shadow:0 1px 2px rgba(0,0,0,.08);min-width:90px}
.tot b{display:block;font-size:24px}
.tot.failed b{color:#c62828}.tot.passed b{color:#2e7d32}.tot.errors b{color:#ef6c00}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px rgba(0,0,0,.08);margin:0 0 16px}
th,td{padding:5px 10px;border-bottom:1px solid #e3e6ea;text-align:left;vertical-align:top}
th{background:#eef0f3;font-weight:600}
td.n{text-align:right;font-variant-numeric:tabular-nums}
td.bad{color:#c62828;font-weight:600}
code,pre{font:12px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{margin:0;white-space:pre-wrap;word-break:break-all}
details.session{background:#fff;border-radius:6px;margin:0 0 12px;box-shadow:0 1px 2px rgba(0,0,0,.08)}
details.session>summary{padding:10px 14px;cursor:pointer;font-weight:600}
details.session>summary .api{color:#56606b;font-weight:400;margin-left:8px}
.body{padding:0 14px 14px}
.cols{display:grid;grid-template-columns:repeat(auto-fit,minmax(300px,1fr));gap:10px}
.col{border:1px solid #e3e6ea;border-radius:4px;padding:8px;overflow:auto;max-height:600px}
.col h4{margin:0 0 6px;font-size:13px;color:#56606b}
mark{background:#ffd6d6;color:#8b0000;border-radius:2px;outline:1px solid #f3a5a5}
.col.replayed mark{background:#d9f2d9;color:#14532d;outline-color:#9fd89f}
.k{color:#6a3d9a}
.kind-changed{color:#c62828}.kind-added{color:#2e7d32}.kind-removed{color:#8e24aa}
.state{font-size:12px;padding:1px 6px;border-radius:8px;background:#eee;margin-left:6px}
.state.changed,.state.no-recording,.state.never-made{background:#ffd6d6}
.none{color:#8a939e;font-style:italic}
.call{margin:10px 0;border-top:1px dashed #d0d5db;padding-top:8px}
#filter{padding:6px 8px;width:320px;margin:0 8px 12px 0}
h2{font-size:16px;margin:20px 0 8px}
.pre{color:#56606b}
table.findings{width:100%;table-layout:fixed}
table.findings td{overflow-wrap:anywhere}
table.findings code{white-space:pre-wrap;word-break:break-all}
table.findings th:nth-child(1){width:17%}table.findings th:nth-child(2){width:17%}table.findings th:nth-child(3){width:9%}
table.findings th:nth-child(6){width:12%}
table.calldiffs th:nth-child(1){width:17%}table.calldiffs th:nth-child(2){width:9%}table.calldiffs th:nth-child(3),table.calldiffs th:nth-child(4){width:31%}
details.errors>summary{cursor:pointer;margin:0 0 8px}
</style></head>
<body>
<header><h1>{{.Title}}</h1>
<div class="sub">{{if .AB}}A/B: candidate {{.S.Target}} against baseline {{.S.Baseline}}{{else}}target {{.S.Target}}{{end}}
 · started {{.S.Started.UTC.Format "2006-01-02 15:04:05"}} UTC · {{printf "%.1f" .S.Seconds}} s · {{printf "%.1f" .S.Rate}} sessions/s{{if .S.NoiseRules}} · {{.S.NoiseRules}} noise rules{{end}}</div></header>
<main>
<div class="totals" id="totals">
<div class="tot"><b id="total-sessions">{{.S.Sessions}}</b>sessions</div>
<div class="tot passed"><b id="total-passed">{{.S.Passed}}</b>passed</div>
<div class="tot failed"><b id="total-failed">{{.S.Failed}}</b>failed</div>
<div class="tot errors"><b id="total-errors">{{.S.Errors}}</b>errors</div>
{{if .AB}}<div class="tot"><b>{{.S.Preexisting}}</b>with differences also in baseline</div>{{end}}
</div>

<h2>APIs</h2>
<table id="apis"><tr><th>API</th><th>sessions</th><th>passed</th><th>failed</th><th>errors</th><th>pass rate</th><th>most frequent differences</th></tr>
{{range .S.APIs}}<tr><td><code>{{.API}}</code></td><td class="n">{{.Sessions}}</td><td class="n">{{.Passed}}</td><td class="n{{if .Failed}} bad{{end}}">{{.Failed}}</td><td class="n">{{.Errors}}</td><td class="n">{{pct .Passed .Sessions}}</td>
<td>{{range .Paths}}<code>{{.Path}}</code> ({{.Sessions}})<br>{{end}}</td></tr>
{{end}}</table>

{{if .S.ErrorSessions}}<h2>Errors (not compared)</h2>
<details class="errors"{{if le (len .S.ErrorSessions) 10}} open{{end}}><summary>{{.S.Errors}} session(s) could not be compared: target unreachable, timeout, reset, or a recording that does not parse</summary>
<table id="errors"><tr><th>session</th><th>API</th><th>error</th></tr>
{{range .S.ErrorSessions}}<tr><td><code>{{.Session}}</code></td><td><code>{{.API}}</code></td><td>{{.Error}}</td></tr>
{{end}}</table></details>{{end}}

<h2>Failing sessions{{if lt .S.DetailsShown .S.Failed}} (first {{.S.DetailsShown}} of {{.S.Failed}}; all are in sessions.jsonl){{end}}</h2>
{{if .Sessions}}<input id="filter" type="search" placeholder="filter by session, API or path">
<button type="button" id="expand">expand all</button> <button type="button" id="collapse">collapse all</button>{{else}}<p>None.</p>{{end}}
<div id="sessions">
{{range $i, $s := .Sessions}}<details class="session" id="session-{{$s.ID}}" data-search="{{$s.ID}} {{$s.API}}{{range $s.Findings}} {{.Path}}{{end}}"{{if lt $i 3}} open{{end}}>
<summary><code>{{$s.ID}}</code><span class="api">{{$s.API}} · {{len $s.Findings}} difference(s){{if $s.Trace}} · trace {{$s.Trace}}{{end}}</span></summary>
<div class="body">
<table class="findings"><tr><th>where</th><th>path</th><th>kind</th><th>recorded</th><th>replayed</th><th>note</th></tr>
{{range $s.Findings}}<tr class="finding"><td>{{.Where}}</td><td><code class="path">{{.Path}}</code></td><td class="kind-{{.Kind}}">{{.Kind}}</td><td><code>{{.Want}}</code></td><td><code>{{.Got}}</code></td><td>{{.Note}}</td></tr>
{{end}}{{range $s.Preexisting}}<tr class="pre"><td>{{.Where}}</td><td><code>{{.Path}}</code></td><td>also in baseline</td><td><code>{{.Want}}</code></td><td><code>{{.Got}}</code></td><td>{{.Note}}</td></tr>
{{end}}</table>
<h4>inbound request</h4><div class="col"><pre>{{$s.Request}}</pre></div>
<h4>responses</h4>
<div class="cols">{{range $s.Columns}}<div class="col{{if eq .Title "replayed (candidate)"}} replayed{{end}}"><h4>{{.Title}}</h4>
<pre>{{if .Decoded}}{{.Decoded}}{{else}}{{if .StatusMark}}<mark data-path="status">{{.Status}}</mark>{{else}}{{.Status}}{{end}}
{{range .Headers}}{{if .Mark}}<mark data-path="header.{{.Name}}">{{.Name}}: {{.Value}}</mark>{{else}}{{.Name}}: {{.Value}}{{end}}
{{end}}
{{.Body}}{{end}}</pre>{{if .Note}}<div class="none">{{.Note}}</div>{{end}}</div>{{end}}</div>
{{if $s.Calls}}<h4>downstream calls</h4>
{{range $s.Calls}}<div class="call"><b>{{.Title}}</b> <code>{{.Summary}}</code><span class="state {{.State}}">{{.State}}</span>
{{if .Diffs}}<table class="findings calldiffs"><tr><th>path</th><th>kind</th><th>recorded</th><th>replayed</th><th>note</th></tr>{{range .Diffs}}<tr><td><code class="path">{{.Path}}</code></td><td class="kind-{{.Kind}}">{{.Kind}}</td><td><code>{{.Want}}</code></td><td><code>{{.Got}}</code></td><td>{{.Note}}</td></tr>{{end}}</table>{{end}}
<div class="cols"><div class="col"><h4>recorded request</h4><pre>{{.Recorded}}</pre></div><div class="col replayed"><h4>replayed request</h4><pre>{{.Replayed}}</pre></div></div></div>
{{end}}{{end}}
</div></details>
{{end}}</div>

{{if .Noise}}<h2>Noise rules in effect (detected)</h2>
<table id="noise"><tr><th>API</th><th>scope</th><th>destination</th><th>ignored path</th></tr>
{{range .Noise}}<tr><td><code>{{.API}}</code></td><td>{{.Scope}}</td><td>{{.Dst}}</td><td><code>{{.Ignore}}</code></td></tr>
{{end}}</table>{{end}}
</main>
<script>
(function(){
  var f=document.getElementById('filter');
  var all=function(){return document.querySelectorAll('details.session');};
  if(f){f.addEventListener('input',function(){
    var q=f.value.toLowerCase();
    all().forEach(function(d){d.style.display=d.getAttribute('data-search').toLowerCase().indexOf(q)>=0?'':'none';});
  });}
  var e=document.getElementById('expand'),c=document.getElementById('collapse');
  if(e){e.onclick=function(){all().forEach(function(d){d.open=true;});};}
  if(c){c.onclick=function(){all().forEach(function(d){d.open=false;});};}
})();
</script>
</body></html>
`

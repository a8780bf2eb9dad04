package analyze

import (
	"fmt"
	"html"
	"html/template"
	"io"
	"math"
	"strings"
)

// WriteHTML writes the report as one self-contained page: tables and inline
// SVG plots (latency over time, throughput over time, latency distribution),
// no scripts, styles or fonts from anywhere else.
func (r *Report) WriteHTML(w io.Writer) error {
	type runView struct {
		Label string
		S     *Summary
	}
	data := struct {
		Runs       []runView
		Compare    bool
		Single     *Summary
		Comparison *Comparison
		Violations []Violation
		Charts     []template.HTML
	}{Compare: r.Candidate != nil, Single: r.Summary, Comparison: r.Comparison, Violations: r.Violations}
	runs := []*Run{r.base}
	labels := []string{"run"}
	data.Runs = []runView{{"run", r.Summary}}
	if r.Candidate != nil {
		runs = append(runs, r.cand)
		labels = []string{"baseline", "candidate"}
		data.Runs = []runView{{"baseline", r.Summary}, {"candidate", r.Candidate}}
	}
	data.Charts = []template.HTML{
		template.HTML(latencyOverTime(runs, labels)),
		template.HTML(throughputOverTime(runs, labels)),
		template.HTML(distribution(runs, labels)),
	}
	return page.Execute(w, data)
}

var colors = [][2]string{{"#1f77b4", "#7fb3de"}, {"#d62728", "#f09a9b"}}

type point struct{ X, Y float64 }

type series struct {
	Name   string
	Color  string
	Dashed bool
	Pts    []point
}

func latencyOverTime(runs []*Run, labels []string) string {
	var ss []series
	for i, run := range runs {
		var p50, p99 []point
		t0 := run.Started.Unix()
		for _, s := range run.Seconds {
			if s.Count == 0 {
				continue
			}
			x := float64(s.T - t0)
			p50 = append(p50, point{x, float64(s.Hist.ValueAtQuantile(50)) / 1000})
			p99 = append(p99, point{x, float64(s.Hist.ValueAtQuantile(99)) / 1000})
		}
		ss = append(ss, series{labels[i] + " p99", colors[i][0], false, p99}, series{labels[i] + " p50", colors[i][1], true, p50})
	}
	return chart("Latency over time (per second of completion)", "seconds since start", "ms", ss, false)
}

func throughputOverTime(runs []*Run, labels []string) string {
	var ss []series
	for i, run := range runs {
		var done, errs []point
		t0 := run.Started.Unix()
		for _, s := range run.Seconds {
			x := float64(s.T - t0)
			done = append(done, point{x, float64(s.Count)})
			errs = append(errs, point{x, float64(s.Errors)})
		}
		ss = append(ss, series{labels[i] + " completed/s", colors[i][0], false, done}, series{labels[i] + " errors/s", colors[i][1], true, errs})
	}
	return chart("Throughput over time", "seconds since start", "requests/s", ss, false)
}

// distribution plots latency against percentile on a "nines" axis: x is
// −log10(1−q), so 90%, 99%, 99.9% are equally spaced.
func distribution(runs []*Run, labels []string) string {
	var ss []series
	for i, run := range runs {
		h := run.Total.Hist
		if h.TotalCount() == 0 {
			continue
		}
		maxX := math.Min(5, math.Max(1, math.Log10(float64(h.TotalCount()))))
		var pts []point
		for x := 0.0; x <= maxX+1e-9; x += 0.05 {
			q := 100 * (1 - math.Pow(10, -x))
			pts = append(pts, point{x, float64(h.ValueAtQuantile(q)) / 1000})
		}
		pts = append(pts, point{maxX, float64(h.Max()) / 1000})
		ss = append(ss, series{labels[i], colors[i][0], false, pts})
	}
	return chart("Latency distribution (all requests)", "percentile", "ms", ss, true)
}

const (
	chartW, chartH = 760, 300
	padL, padR     = 64, 16
	padT, padB     = 36, 64
)

// chart renders series as an SVG line chart. nines labels the x axis as
// percentiles (x = −log10(1−q)).
func chart(title, xlabel, ylabel string, ss []series, nines bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`,
		chartW, chartH, chartW, chartH, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%d" y="20" class="title">%s</text>`, padL, html.EscapeString(title))
	minX, maxX, maxY := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range ss {
		for _, p := range s.Pts {
			minX, maxX, maxY = math.Min(minX, p.X), math.Max(maxX, p.X), math.Max(maxY, p.Y)
		}
	}
	if math.IsInf(minX, 1) {
		b.WriteString(`<text x="300" y="150">no data</text></svg>`)
		return b.String()
	}
	if nines {
		minX = 0
	}
	if maxX <= minX {
		maxX = minX + 1
	}
	yTicks := niceTicks(maxY)
	maxY = yTicks[len(yTicks)-1]
	pw, ph := float64(chartW-padL-padR), float64(chartH-padT-padB)
	sx := func(x float64) float64 { return padL + (x-minX)/(maxX-minX)*pw }
	sy := func(y float64) float64 { return padT + ph - y/maxY*ph }
	for _, t := range yTicks {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" class="grid"/><text x="%d" y="%.1f" class="ytick">%s</text>`,
			padL, chartW-padR, sy(t), sy(t), padL-6, sy(t)+4, trimFloat(t))
	}
	var xt []float64
	if nines {
		for x := 0.0; x <= maxX+1e-9; x++ {
			xt = append(xt, x)
		}
	} else {
		xt = niceTicksRange(minX, maxX)
	}
	for _, t := range xt {
		label := trimFloat(t)
		if nines {
			label = trimFloat(100*(1-math.Pow(10, -t))) + "%"
		}
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" class="grid"/><text x="%.1f" y="%d" class="xtick">%s</text>`,
			sx(t), sx(t), padT, chartH-padB, sx(t), chartH-padB+16, label)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" class="xlabel">%s</text>`, padL+int(pw/2), chartH-padB+34, html.EscapeString(xlabel))
	fmt.Fprintf(&b, `<text x="14" y="%d" class="ylabel" transform="rotate(-90 14 %d)">%s</text>`, padT+int(ph/2), padT+int(ph/2), html.EscapeString(ylabel))
	for i, s := range ss {
		if len(s.Pts) == 0 {
			continue
		}
		var pts []string
		for _, p := range s.Pts {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", sx(p.X), sy(p.Y)))
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="5 3"`
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.8"%s points="%s"/>`, s.Color, dash, strings.Join(pts, " "))
		if len(s.Pts) == 1 {
			fmt.Fprintf(&b, `<circle cx="%s" r="3" fill="%s"/>`, strings.Replace(pts[0], ",", `" cy="`, 1), s.Color)
		}
		lx := padL + 10 + (i%4)*170
		ly := chartH - 12
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"%s/><text x="%d" y="%d" class="legend">%s</text>`,
			lx, lx+22, ly-4, ly-4, s.Color, dash, lx+27, ly, html.EscapeString(s.Name))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// niceTicks returns 0 and round steps (1, 2 or 5 × 10^k) up to at least max.
func niceTicks(max float64) []float64 {
	if max <= 0 {
		return []float64{0, 1}
	}
	return niceTicksRange(0, max)
}

func niceTicksRange(lo, hi float64) []float64 {
	span := hi - lo
	if span <= 0 {
		span = 1
	}
	raw := span / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for t := math.Floor(lo/step) * step; ; t += step {
		out = append(out, t)
		if t >= hi-1e-9 {
			break
		}
	}
	return out
}

func trimFloat(f float64) string {
	s := fmt.Sprintf("%.3f", f)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		return "0"
	}
	return s
}

// pairOf formats one metric of baseline and candidate as "b → c".
func pairOf(b, c *Entry, what string) string {
	f := func(e *Entry) string {
		if e == nil {
			return "-"
		}
		switch what {
		case "count":
			return fmt.Sprint(e.Count)
		case "errors":
			return fmt.Sprint(e.Errors)
		case "p50":
			return num(e.P50Ms)
		case "p90":
			return num(e.P90Ms)
		case "p99":
			return num(e.P99Ms)
		case "max":
			return num(e.MaxMs)
		default:
			return fmt.Sprintf("%.1f", e.Rate)
		}
	}
	return f(b) + " → " + f(c)
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"ms":     num,
	"pairOf": pairOf,
	"pct":    func(f float64) string { return fmt.Sprintf("%.2f%%", f*100) },
	"rate": func(f float64) string {
		return fmt.Sprintf("%.1f", f)
	},
	"delta": func(d Delta, ch float64) template.HTML {
		if d.Baseline == nil || d.Candidate == nil {
			return ""
		}
		class := "same"
		switch {
		case ch > 0.05:
			class = "worse"
		case ch < -0.05:
			class = "better"
		}
		return template.HTML(fmt.Sprintf(`<span class="%s">%+.1f%%</span>`, class, ch*100))
	},
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>retrace load report</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0}
th,td{padding:3px 10px;border-bottom:1px solid #ddd;text-align:right;white-space:nowrap}
th:first-child,td:first-child{text-align:left}
tr.total td{font-weight:600}
.worse{color:#c00}.better{color:#070}.same{color:#666}
.violations{color:#c00}
svg{display:block;margin:12px 0;background:#fff;border:1px solid #eee}
svg .title{font-size:14px;font-weight:600}
svg .grid{stroke:#e6e6e6}
svg .xtick{font-size:11px;text-anchor:middle}svg .ytick{font-size:11px;text-anchor:end}
svg .xlabel,svg .ylabel{font-size:12px;text-anchor:middle}svg .legend{font-size:12px}
.meta{color:#555}
</style></head><body>
<h1>retrace load report</h1>
{{range .Runs}}<p class="meta"><b>{{.Label}}</b>: {{.S.Run}} — {{.S.Shards}} shard(s), started {{.S.Started}}, {{printf "%.1f" .S.DurationS}}s, {{.S.Sent}} sent, achieved {{rate .S.Total.Rate}} req/s{{if .S.Late}}, {{.S.Late}} sent late{{end}}{{if .S.BadLines}}, {{.S.BadLines}} bad input lines{{end}}{{if .S.Missing}}, <b>missing shards: {{range .S.Missing}}{{.}} {{end}}</b>{{end}}</p>
{{end}}
{{if .Violations}}<div class="violations"><h2>Thresholds crossed</h2><ul>{{range .Violations}}<li>{{.}}</li>{{end}}</ul></div>{{end}}
<h2>Per API</h2>
{{if .Compare}}
<table><tr><th>api</th><th>count</th><th>errors</th><th>p50 ms</th><th></th><th>p90 ms</th><th></th><th>p99 ms</th><th></th><th>max ms</th><th></th><th>rate/s</th></tr>
{{with .Comparison.Total}}{{template "drow" .}}{{end}}
{{range .Comparison.APIs}}{{template "drow" .}}{{end}}
</table>
{{else}}
<table><tr><th>api</th><th>count</th><th>errors</th><th>error rate</th><th>rate/s</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>p99.9 ms</th><th>max ms</th></tr>
{{with .Single.Total}}<tr class="total">{{template "row" .}}</tr>{{end}}
{{range .Single.APIs}}<tr>{{template "row" .}}</tr>{{end}}
</table>
{{end}}
<h2>Plots</h2>
{{range .Charts}}{{.}}{{end}}
</body></html>
{{define "row"}}<td>{{.API}}</td><td>{{.Count}}</td><td>{{.Errors}}</td><td>{{pct .ErrorRate}}</td><td>{{rate .Rate}}</td><td>{{ms .P50Ms}}</td><td>{{ms .P90Ms}}</td><td>{{ms .P99Ms}}</td><td>{{ms .P999Ms}}</td><td>{{ms .MaxMs}}</td>{{end}}
{{define "drow"}}<tr{{if eq .API "total"}} class="total"{{end}}><td>{{.API}}</td><td>{{template "pair" (pairOf .Baseline .Candidate "count")}}</td><td>{{template "pair" (pairOf .Baseline .Candidate "errors")}}</td><td>{{template "pair" (pairOf .Baseline .Candidate "p50")}}</td><td>{{delta . .P50Change}}</td><td>{{template "pair" (pairOf .Baseline .Candidate "p90")}}</td><td>{{delta . .P90Change}}</td><td>{{template "pair" (pairOf .Baseline .Candidate "p99")}}</td><td>{{delta . .P99Change}}</td><td>{{template "pair" (pairOf .Baseline .Candidate "max")}}</td><td>{{delta . .MaxChange}}</td><td>{{template "pair" (pairOf .Baseline .Candidate "rate")}}</td></tr>{{end}}
{{define "pair"}}{{.}}{{end}}
`))

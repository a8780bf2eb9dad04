package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/retrace-dev/retrace/replayer/analyze"
	"github.com/retrace-dev/retrace/replayer/objstore"
)

func init() {
	commands["analyze"] = command{summary: "load step 4: merge shard results; per-API percentiles; compare two runs (CI gate)", run: runAnalyze}
}

// compareFlag is a boolean flag that switches the directories after it to
// the candidate run.
type compareFlag struct{ on *bool }

func (c compareFlag) String() string   { return "" }
func (c compareFlag) IsBoolFlag() bool { return true }
func (c compareFlag) Set(s string) error {
	if s != "true" {
		return fmt.Errorf("takes no value: list the directories after it")
	}
	*c.on = true
	return nil
}

// percentFlag is a threshold given as "10%" or 0.1; unset is −1.
type percentFlag struct{ v *float64 }

func (f percentFlag) String() string {
	if f.v == nil || *f.v < 0 {
		return ""
	}
	return fmt.Sprintf("%g%%", *f.v*100)
}

func (f percentFlag) Set(s string) error {
	if s == "off" {
		*f.v = -1
		return nil
	}
	v, err := analyze.ParsePercent(s)
	if err != nil {
		return err
	}
	*f.v = v
	return nil
}

func runAnalyze(ctx context.Context, p *proc, args []string) error {
	fs := newFlagSet(p, "analyze", "DIR… [--compare DIR…] [--format text|json|html] [--out FILE] [thresholds]",
		"retrace analyze runs/v1 --compare runs/v2 --max-p99-increase 10% --max-error-rate 1% --format html --out report.html")
	var comparing bool
	fs.Var(compareFlag{&comparing}, "compare", "the directories after this flag are the candidate run, compared with the ones before")
	format := fs.String("format", "text", "text, json or html")
	out := fs.String("out", "-", "where to write the report: a path, a bucket URL, or - for stdout")
	th := analyze.NoThresholds()
	fs.Var(percentFlag{&th.MaxP50Increase}, "max-p50-increase", "fail when the candidate's p50 rises more than this (e.g. 10%), in total or for an API")
	fs.Var(percentFlag{&th.MaxP99Increase}, "max-p99-increase", "fail when the candidate's p99 rises more than this (e.g. 10%), in total or for an API")
	fs.Var(percentFlag{&th.MaxErrorRate}, "max-error-rate", "fail when the error rate (of the candidate) exceeds this (e.g. 1%), in total or for an API")
	fs.DurationVar(&th.MaxP99, "max-p99", 0, "fail when the p99 (of the candidate) exceeds this, in total or for an API")
	fs.Int64Var(&th.MinCount, "min-count", 20, "requests an API needs (in both runs) for its own thresholds to be checked")
	th.MaxCountDecrease = 0.1
	fs.Var(percentFlag{&th.MaxCountDecrease}, "max-count-decrease",
		"fail when the candidate sent this much fewer requests than the baseline (off: not checked); a candidate with no requests, or missing an API of the baseline, always fails")
	var base, cand []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		if comparing {
			cand = append(cand, fs.Arg(0))
		} else {
			base = append(base, fs.Arg(0))
		}
		args = fs.Args()[1:]
	}
	if len(base) == 0 {
		return usageError("give at least one results directory")
	}
	if comparing && len(cand) == 0 {
		return usageError("--compare needs at least one directory after it")
	}
	switch *format {
	case "text", "json", "html":
	default:
		return usageError("unknown --format %q (want text, json or html)", *format)
	}
	baseRun, err := analyze.Load(ctx, base...)
	if err != nil {
		return usageError("%v", err)
	}
	var candRun *analyze.Run
	if comparing {
		if candRun, err = analyze.Load(ctx, cand...); err != nil {
			return usageError("%v", err)
		}
	}
	rep := analyze.NewReport(baseRun, candRun, th)
	w, err := objstore.CreateFile(ctx, *out, p.Stdout)
	if err != nil {
		return err
	}
	switch *format {
	case "json":
		err = rep.WriteJSON(w)
	case "html":
		err = rep.WriteHTML(w)
	default:
		err = rep.WriteText(w)
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing the report to %s: %w", *out, err)
	}
	if n := len(rep.Violations); n > 0 {
		msgs := make([]string, 0, n)
		for _, v := range rep.Violations {
			msgs = append(msgs, v.String())
		}
		return failed("%d threshold(s) crossed: %s", n, strings.Join(msgs, "; "))
	}
	return nil
}

var _ flag.Value = compareFlag{}

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/retrace-dev/retrace/replayer/load"
	"github.com/retrace-dev/retrace/replayer/objstore"
	"github.com/retrace-dev/retrace/replayer/prepare"
)

func init() {
	commands["prepare"] = command{summary: "load step 2: timed requests → what the target executes (as is, templated, rewritten)", run: runPrepare}
}

func runPrepare(ctx context.Context, p *proc, args []string) error {
	fs := newFlagSet(p, "prepare", "--in FILE --out FILE [--template FILE] [--host H] [--header 'K: V']…",
		"retrace prepare --in requests.jsonl --template v2-sql.tmpl --out v2.jsonl")
	in := fs.String("in", "-", "timed-request JSONL to read: a path, a bucket URL, or - for stdin")
	out := fs.String("out", "-", "prepared JSONL to write: a path, a bucket URL, or - for stdout")
	tmplFile := fs.String("template", "", "Go text/template rendered per request: SQL text, a JSON object of fields to replace, or nothing to drop it")
	host := fs.String("host", "", "set the Host header of HTTP requests")
	var set, drop multiFlag
	fs.Var(&set, "header", "'Name: value' to set on HTTP requests (repeatable)")
	fs.Var(&drop, "drop-header", "header name to remove from HTTP requests (repeatable)")
	showBad := fs.Int("show-bad", 20, "failures printed (all are counted)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *showBad < 0 {
		return usageError("--show-bad %d: want 0 or more", *showBad)
	}
	if fs.NArg() > 0 {
		return usageError("unexpected argument %q", fs.Arg(0))
	}
	cfg := prepare.Config{Host: *host, DropHeaders: drop}
	if len(set) > 0 {
		cfg.SetHeaders = http.Header{}
		for _, h := range set {
			k, v, err := prepare.ParseHeader(h)
			if err != nil {
				return usageError("%v", err)
			}
			cfg.SetHeaders.Add(k, v)
		}
	}
	if *tmplFile != "" {
		r, err := objstore.OpenFile(ctx, *tmplFile, p.Stdin)
		if err != nil {
			return usageError("--template: %v", err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return fmt.Errorf("reading %s: %w", *tmplFile, err)
		}
		cfg.Template, cfg.TemplateName = string(b), *tmplFile
	}
	prep, err := prepare.New(cfg)
	if err != nil {
		return usageError("%v", err)
	}
	r, err := objstore.OpenFile(ctx, *in, p.Stdin)
	if err != nil {
		return usageError("--in %s: %v", *in, err)
	}
	defer r.Close()
	w, err := objstore.CreateFile(ctx, *out, p.Stdout)
	if err != nil {
		return err
	}
	shown := 0
	inName := *in
	if inName == "-" {
		inName = "stdin"
	}
	st, err := prepare.Run(ctx, prep, load.NewReader(r, inName), load.NewWriter(w), func(e error) {
		if shown < *showBad {
			shown++
			fmt.Fprintf(p.Stderr, "prepare: skipped %v\n", e)
		}
	})
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	fmt.Fprintf(p.Stderr, "prepare: %d requests read, %d written, %d dropped by the template, %d failed, %d bad lines\n",
		st.Read, st.Written, st.Dropped, st.Failed, st.Bad)
	if err == nil && st.Read == 0 {
		return usageError("--in %s: no valid request line (%d bad lines)", inName, st.Bad)
	}
	return err
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/retrace-dev/retrace/recording"
)

func init() {
	commands["recordings"] = command{summary: "summarise, list, show or copy recorded sessions", run: runRecordings}
}

func runRecordings(ctx context.Context, p *proc, args []string) error {
	fs := newFlagSet(p, "recordings", "[--list | --id ID | --trace ID | --copy DST] [--json] SRC",
		"retrace recordings --copy redis://127.0.0.1:6379/0 ./retrace-recordings")
	list := fs.Bool("list", false, "one line per session: time, id, request line, status line, calls, duration")
	id := fs.String("id", "", "print the session with this id as indented JSON")
	traceID := fs.String("trace", "", "list every session of the distributed trace `ID` (the W3C trace-id of their traceparent), like --list")
	copyTo := fs.String("copy", "", "copy every session into the store `DST` (a directory, file://, redis://, s3://, …)")
	asJSON := fs.Bool("json", false, "print the summary as JSON")
	gz := fs.Bool("gzip", false, "with --copy into a directory or bucket: write .jsonl.gz files")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError("want one recordings source (SRC), got %d arguments", fs.NArg())
	}
	modes := 0
	for _, on := range []bool{*list, *id != "", *traceID != "", *copyTo != ""} {
		if on {
			modes++
		}
	}
	if modes > 1 {
		return usageError("--list, --id, --trace and --copy exclude each other")
	}
	if err := existingSource(fs.Arg(0)); err != nil {
		return err
	}
	var skipped []error
	src, err := recording.Open(ctx, fs.Arg(0), recording.WithErrorHandler(func(err error) { skipped = append(skipped, err) }))
	if err != nil {
		return usageError("%s: %v", fs.Arg(0), err)
	}
	defer src.Close()
	defer func() {
		for _, e := range skipped {
			fmt.Fprintln(p.Stderr, e)
		}
	}()
	switch {
	case *id != "":
		s, err := src.Get(ctx, *id)
		if err != nil {
			return err
		}
		b, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintln(p.Stdout, string(b))
		return nil
	case *list, *traceID != "":
		want := strings.ToLower(strings.TrimSpace(*traceID))
		n := 0
		err := src.Scan(ctx, func(s *recording.Session) error {
			if want != "" && s.Trace != want {
				return nil
			}
			n++
			fmt.Fprintf(p.Stdout, "%s  %s  %-40s  %-24s  %2d calls  %s\n", s.At.UTC().Format(time.RFC3339Nano), s.ID,
				s.RequestLine(), s.StatusLine(), len(s.Calls), time.Duration(s.Inbound.DurNs))
			return nil
		})
		if err == nil && want != "" && n == 0 {
			return fmt.Errorf("%s: no session of trace %q", fs.Arg(0), want)
		}
		return err
	case *copyTo != "":
		dst, err := recording.Open(ctx, *copyTo, recording.WithGzip(*gz))
		if err != nil {
			return err
		}
		n, err := recording.Copy(ctx, dst, src)
		err = errors.Join(err, dst.Close())
		if err != nil {
			return fmt.Errorf("copy %s → %s after %d sessions: %w", fs.Arg(0), *copyTo, n, err)
		}
		fmt.Fprintf(p.Stdout, "copied %d sessions to %s\n", n, *copyTo)
		return nil
	}
	sum, err := recording.Summarize(ctx, src)
	if err != nil {
		return err
	}
	if *asJSON {
		b, err := json.Marshal(sum)
		if err != nil {
			return err
		}
		fmt.Fprintln(p.Stdout, string(b))
		return nil
	}
	fmt.Fprintf(p.Stdout, "sessions  %d", sum.Sessions)
	if sum.Sessions > 0 {
		fmt.Fprintf(p.Stdout, " (%s … %s)", sum.First.UTC().Format(time.RFC3339), sum.Last.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(p.Stdout, "\ncalls     %d (%d set-up)\n", sum.Calls, sum.SetupCalls)
	printCounts(p, "by proto", sum.ByProto)
	printCounts(p, "by app", sum.Apps)
	fmt.Fprintf(p.Stdout, "truncated %d sessions\nskipped   %d lines\n", sum.Truncated, sum.Skipped)
	return nil
}

func printCounts(p *proc, title string, m map[string]int) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(p.Stdout, "  %-8s %-10s %d\n", title, k, m[k])
	}
}

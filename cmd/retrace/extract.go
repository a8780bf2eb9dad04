package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/replayer/extract"
	"github.com/retrace-dev/retrace/replayer/load"
	"github.com/retrace-dev/retrace/replayer/objstore"
)

func init() {
	commands["extract"] = command{summary: "load step 1: recordings or logs → timed requests (JSONL, ordered by time)", run: runExtract}
}

// multiFlag collects a repeated string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ", ") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

// timeFlag parses RFC 3339 times.
type timeFlag struct{ t time.Time }

func (f *timeFlag) String() string {
	if f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339Nano)
}

func (f *timeFlag) Set(s string) error {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fmt.Errorf("want an RFC 3339 time such as 2026-11-29T10:00:00Z")
	}
	f.t = t
	return nil
}

func runExtract(ctx context.Context, p *proc, args []string) error {
	fs := newFlagSet(p, "extract", "--from SRC [--format F] [--since T --until T | --for D] [--out FILE]",
		"retrace extract --from ./retrace-recordings --since 2026-11-29T10:00:00Z --for 1h --out requests.jsonl")
	from := fs.String("from", "", "source: a recordings directory or store URL, a log file, or - for stdin (required)")
	format := fs.String("format", "auto", "source format: auto, recording, jsonl, combined (nginx/Apache access log; also reads common)")
	out := fs.String("out", "-", "timed-request JSONL to write: a path, a bucket URL, or - for stdout")
	var since, until timeFlag
	fs.Var(&since, "since", "first time of the window (RFC 3339, inclusive)")
	fs.Var(&until, "until", "end of the window (RFC 3339, exclusive)")
	span := fs.Duration("for", 0, "window length from --since (instead of --until)")
	f := extract.DefaultJSONFields()
	fs.StringVar(&f.Time, "time-field", f.Time, "jsonl: field with the time (dotted paths reach nested objects)")
	fs.StringVar(&f.TimeFormat, "time-format", "auto", "jsonl: auto, unix, unix_ms, unix_us, unix_ns, or a Go layout")
	fs.StringVar(&f.Method, "method-field", f.Method, "jsonl: field with the HTTP method")
	fs.StringVar(&f.URL, "url-field", f.URL, "jsonl: field with the URL or path")
	fs.StringVar(&f.Headers, "headers-field", f.Headers, "jsonl: field with the headers object")
	fs.StringVar(&f.Body, "body-field", f.Body, "jsonl: field with the body")
	fs.StringVar(&f.Query, "query-field", f.Query, "jsonl: field with a query text (SQL or a query language to prepare)")
	fs.StringVar(&f.API, "api-field", "", "jsonl: field with the API name (default: method and path)")
	fs.StringVar(&f.ID, "id-field", "", "jsonl: field with a request id (default: file:line)")
	var meta multiFlag
	fs.Var(&meta, "meta", "jsonl: NAME=FIELD copied into the request's meta for templates (repeatable)")
	chunk := fs.Int("chunk", 100000, "requests sorted in memory at once; longer inputs are sorted in runs on disk")
	tmp := fs.String("tmp", "", "directory for sorted runs (default: the system's)")
	showBad := fs.Int("show-bad", 20, "bad lines printed (all are counted)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *from == "" {
		return usageError("--from is required")
	}
	if fs.NArg() > 0 {
		return usageError("unexpected argument %q", fs.Arg(0))
	}
	opts := extract.Options{From: since.t, To: until.t, ChunkSize: *chunk, TempDir: *tmp}
	if *span > 0 {
		if since.t.IsZero() || !until.t.IsZero() {
			return usageError("--for needs --since and excludes --until")
		}
		opts.To = since.t.Add(*span)
	}
	if len(meta) > 0 {
		f.Meta = map[string]string{}
		for _, m := range meta {
			k, v, ok := strings.Cut(m, "=")
			if !ok || k == "" || v == "" {
				return usageError("bad --meta %q (want NAME=FIELD)", m)
			}
			f.Meta[k] = v
		}
	}
	src, closeSrc, err := openSource(ctx, p, *from, *format, f)
	if err != nil {
		return usageError("--from %s: %v", *from, err)
	}
	defer closeSrc()
	var bad []extract.BadLine
	opts.OnBad = func(b extract.BadLine) {
		if len(bad) < *showBad {
			bad = append(bad, b)
		}
	}
	w, err := objstore.CreateFile(ctx, *out, p.Stdout)
	if err != nil {
		return err
	}
	st, err := extract.Extract(ctx, src, load.NewWriter(w), opts)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	for _, b := range bad {
		fmt.Fprintf(p.Stderr, "extract: skipped %s\n", b)
	}
	order := "in time order"
	if !st.Sorted {
		order = "not in time order: sorted"
		if st.Runs > 0 {
			order += fmt.Sprintf(" in %d runs on disk", st.Runs)
		}
	}
	fmt.Fprintf(p.Stderr, "extract: %d requests read, %d written, %d outside the window, %d bad lines skipped; source %s\n",
		st.Read, st.Written, st.Outside, st.Bad, order)
	if err != nil {
		return fmt.Errorf("writing %s: %w", *out, err)
	}
	if st.Read == 0 {
		return usageError("--from %s: no request read (%d bad lines; wrong --format?)", *from, st.Bad)
	}
	return nil
}

// openSource picks the reader for src and format ("auto" looks at the
// first line of a file; directories and store URLs are recordings).
func openSource(ctx context.Context, p *proc, src, format string, f extract.JSONFields) (extract.Source, func(), error) {
	nop := func() {}
	isDir := false
	if !objstore.IsURL(src) && src != "-" {
		fi, err := os.Stat(src)
		if err != nil {
			return nil, nop, err
		}
		isDir = fi.IsDir()
	}
	if format == "auto" && isDir && !hasSessionFiles(src) {
		return dirSource(src, "auto", f) // a directory of logs: each file's format is sniffed
	}
	if format == "auto" && (isDir || (objstore.IsURL(src) && !strings.HasSuffix(src, ".jsonl") && !strings.HasSuffix(src, ".log") && !strings.HasSuffix(src, ".gz"))) {
		format = "recording"
	}
	if format == "recording" && (isDir || objstore.IsURL(src)) && !strings.HasSuffix(src, ".jsonl") {
		return &extract.Recordings{Name: src, Open: func(ctx context.Context, onBad func(error)) (extract.SessionReader, error) {
			return recording.Open(ctx, src, recording.WithErrorHandler(onBad))
		}}, nop, nil
	}
	if isDir {
		return dirSource(src, format, f)
	}
	r, err := objstore.OpenFile(ctx, src, p.Stdin)
	if err != nil {
		return nil, nop, err
	}
	closer := func() { r.Close() }
	name := src
	if src == "-" {
		name = "stdin"
	}
	var in io.Reader = r
	if format == "auto" {
		br := bufio.NewReaderSize(r, 256<<10)
		format = sniff(br, name)
		in = br
	}
	s, err := lineSource(name, in, format, f)
	if err != nil {
		closer()
		return nil, nop, err
	}
	return s, closer, nil
}

// hasSessionFiles reports whether dir holds files of a recording directory
// store.
func hasSessionFiles(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if recording.IsSessionFile(e.Name()) {
			return true
		}
	}
	return false
}

// sniff guesses the format from the first non-blank line.
func sniff(br *bufio.Reader, name string) string {
	if strings.HasSuffix(name, ".gz") {
		return "jsonl" // compressed: assume a JSONL log; say --format otherwise
	}
	head, _ := br.Peek(64 << 10)
	line := bytes.TrimSpace(head)
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	switch {
	case bytes.HasPrefix(line, []byte("{")) && bytes.Contains(line, []byte(`"inbound"`)):
		return "recording"
	case bytes.HasPrefix(line, []byte("{")):
		return "jsonl"
	default:
		return "combined"
	}
}

func lineSource(name string, r io.Reader, format string, f extract.JSONFields) (extract.Source, error) {
	switch format {
	case "recording":
		return extract.NewRecordingFiles(name, r), nil
	case "jsonl":
		return &extract.Lines{Name: name, R: r, Parse: extract.JSONLineParser(f)}, nil
	case "combined", "common":
		return &extract.Lines{Name: name, R: r, Parse: extract.ParseAccessLine}, nil
	}
	return nil, usageError("unknown --format %q (want auto, recording, jsonl, combined or common)", format)
}

// dirSource reads every file of a log directory in name order.
func dirSource(dir, format string, f extract.JSONFields) (extract.Source, func(), error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, func() {}, err
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(names)
	return &filesSource{names: names, format: format, f: f}, func() {}, nil
}

type filesSource struct {
	names  []string
	format string
	f      extract.JSONFields
}

func (s *filesSource) Scan(ctx context.Context, fn func(*load.Request) error, bad func(extract.BadLine)) error {
	for _, name := range s.names {
		file, err := os.Open(name)
		if err != nil {
			return err
		}
		format := s.format
		var in io.Reader = file
		if format == "auto" {
			br := bufio.NewReaderSize(file, 256<<10)
			format, in = sniff(br, name), br
		}
		src, err := lineSource(name, in, format, s.f)
		if err == nil {
			err = src.Scan(ctx, fn, bad)
		}
		file.Close()
		if err != nil {
			return err
		}
	}
	if len(s.names) == 0 {
		return errors.New("the directory has no files")
	}
	return nil
}

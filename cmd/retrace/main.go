// Command retrace records production traffic of a Go service and replays it:
// against a new build with downstreams answered from the recording, and as a
// load test at the real pace of production. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"

	// every store for every command: recordings in Redis and buckets
	_ "github.com/retrace-dev/retrace/recording/cloud"      // s3://, gs://, azblob://, mem://, blob+file://
	_ "github.com/retrace-dev/retrace/recording/redisstore" // redis://, rediss://
)

// proc is the process state a command may touch, in one place so whole
// commands run in tests with their own arguments, environment and streams.
type proc struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
}

// command is one subcommand: a summary line for the usage text and the
// function that parses its flags and does the work.
type command struct {
	summary string
	run     func(ctx context.Context, p *proc, args []string) error
}

// commands is the table of subcommands. Each lives in its own file.
var commands = map[string]command{}

// exitError carries an exit status other than the defaults below.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError marks bad command-line input: exit status 2.
func usageError(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

// failed marks a run that worked but whose verdict is negative (failed
// sessions, a crossed threshold): exit status 1 with the given message.
func failed(format string, args ...any) error {
	return &exitError{code: 1, err: fmt.Errorf(format, args...)}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	p := &proc{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	code := run(ctx, p, os.Args[1:])
	stop()
	os.Exit(code)
}

// run executes one command line and maps its error to an exit status: 0 for
// success, 1 for a negative verdict or a runtime failure, 2 for usage errors.
func run(ctx context.Context, p *proc, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(p.Stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(p.Stderr, "retrace: unknown command %q (run 'retrace help' for the list)\n", args[0])
		return 2
	}
	err := c.run(ctx, p, args[1:])
	if err == nil {
		return 0
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(p.Stderr, "retrace %s: %v\n", args[0], err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: retrace <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-11s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'retrace <command> --help' for the flags of a command and an example.")
}

// newFlagSet returns a FlagSet whose usage text shows the command's synopsis
// and an example. Parse errors are reported by the FlagSet itself and
// returned as usage errors.
func newFlagSet(p *proc, name, synopsis, example string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(p.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(p.Stderr, "usage: retrace %s %s\n\nflags:\n", name, synopsis)
		fs.PrintDefaults()
		if example != "" {
			fmt.Fprintf(p.Stderr, "\nexample:\n  %s\n", example)
		}
	}
	return fs
}

// parseFlags parses args into fs and maps parse failures to usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &exitError{code: 2, err: err}
	}
	return nil
}

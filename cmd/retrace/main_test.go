package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// runCLI runs one command line in-process and returns its exit status and
// what it printed.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	p := &proc{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	code = run(context.Background(), p, args)
	return code, out.String(), errb.String()
}

func TestDispatch(t *testing.T) {
	cases := []struct {
		name     string
		args     []string
		code     int
		inStdout string
		inStderr string
	}{
		{"no command", nil, 2, "usage: retrace", ""},
		{"help", []string{"help"}, 0, "commands:", ""},
		{"unknown", []string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{"version", []string{"version"}, 0, "retrace ", ""},
		{"bad flag", []string{"version", "--nope"}, 2, "", "flag provided but not defined"},
		{"command help shows an example", []string{"version", "--help"}, 0, "", "example:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runCLI(t, c.args...)
			if code != c.code || !strings.Contains(out, c.inStdout) || !strings.Contains(errs, c.inStderr) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, stdout containing %q, stderr containing %q",
					code, out, errs, c.code, c.inStdout, c.inStderr)
			}
		})
	}
}

// Every command's --help must show an example (README promise).
func TestEveryCommandHelpHasExample(t *testing.T) {
	for name := range commands {
		t.Run(name, func(t *testing.T) {
			code, _, errs := runCLI(t, name, "--help")
			if code != 0 || !strings.Contains(errs, "example:") {
				t.Fatalf("retrace %s --help: exit %d, output %q", name, code, errs)
			}
		})
	}
}

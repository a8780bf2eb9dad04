package main

import (
	"context"
	"fmt"
	"runtime/debug"
)

func init() {
	commands["version"] = command{summary: "print the version of retrace and of Go", run: runVersion}
}

func runVersion(ctx context.Context, p *proc, args []string) error {
	fs := newFlagSet(p, "version", "", "retrace version")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	v := "(devel)"
	goV := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goV = bi.GoVersion
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
	}
	fmt.Fprintf(p.Stdout, "retrace %s (%s)\n", v, goV)
	return nil
}

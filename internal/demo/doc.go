// Package demo runs the whole retrace story on embedded parts for
// `retrace demo`: an in-memory MySQL server (dolthub/go-mysql-server), an
// in-memory Redis (miniredis) and the pricing service in this process; the
// orders example in a child process with the agent; the mock server and the
// replayers in this process, which is never patched.
package demo

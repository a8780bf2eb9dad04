// Package e2e holds the end-to-end tests of retrace: the orders example
// built as a real binary with the agent's blank import, recorded against
// real redis-server and MariaDB, replayed with every downstream stopped,
// a changed build caught, the traffic load-replayed; `retrace demo` run as
// a user runs it; and the README walkthrough executed command by command.
//
// The tests build cmd/retrace and examples/orders/cmd/orders once per run
// with the go command, and need the servers of internal/testenv.
package e2e

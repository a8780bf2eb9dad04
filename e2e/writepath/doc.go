// Package writepath holds the end-to-end tests of write-path load tests
// (DESIGN.md 15): the orders example, built as a real binary with the
// agent's blank import, recorded against real MariaDB, redis-server and the
// pricing service; then load-replayed with `retrace load --trace-ids` while
// running in replay mode with the pricing service baffled (answered by
// mock servers from each request's recording) and MySQL and Redis
// rewritten to shadow instances.
//
// The tests build cmd/retrace and examples/orders/cmd/orders once per run
// with the go command, and need the servers of internal/testenv, shadows
// included.
package writepath

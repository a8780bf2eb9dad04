// Package e2e holds the end-to-end test of the mock server with the real
// replay agent: a service under the agent in replay mode, its Redis, MySQL
// and HTTP clients redirected to the mock server, answering 128 concurrent
// replayed requests from recordings. It has no code of its own; the test
// lives in a package of its own because the agent patches the whole test
// process.
package e2e

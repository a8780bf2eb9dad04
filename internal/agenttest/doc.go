// Package agenttest has the real servers and clients the agent's tests and
// benchmarks run against: a fan-out HTTP service (plain go statements,
// errgroup, a grandchild goroutine) calling a raw-TCP line protocol, Redis
// and an HTTP downstream; the line server; an HTTP downstream that echoes
// the headers it received; a mock server that decodes the agent's frames
// (trace.FrameReader), checks that every frame carries the trace of the
// request named in its payload, and answers the line protocol, RESP and
// HTTP itself; and an HTTP client that writes through raw system calls so
// its own Retrace-* headers are not stripped by the agent running in the
// same process.
//
// Trace ids made by NewID have the shape rt + 16 hex digits, and the
// service puts its request's id in every downstream payload, so a frame's
// payload names the trace it must carry.
package agenttest

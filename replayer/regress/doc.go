// Package regress replays recorded sessions against a build of the service
// under test and judges them: each session's inbound request is sent with
// the Retrace-Trace-Id and Retrace-Replay-Time headers (DESIGN.md 3.2) at a
// chosen concurrency, its response is compared with the recorded one, and
// the downstream requests the mock server saw for its trace are compared
// with the recorded calls they matched (package diff does the comparing).
//
// Run streams sessions from a Source through a pool of workers and hands
// every Result to a callback, so memory stays flat in the number of
// sessions; only failing sessions carry a Detail (capped payloads).
// DetectNoise replays a sample of sessions several times against one build
// and turns what differed between those runs into ignore rules. With a
// baseline URL set, each session is also replayed against the baseline and
// differences the baseline shows too are reported as pre-existing rather
// than as regressions.
//
// Downstream calls are paired with recorded calls by the mock server's
// match; requests that matched the same recorded call are joined first (a
// recorded Redis pipeline is answered command by command). MySQL traffic is
// compared command by command per destination instead (see mysql.go), since
// how a driver groups its writes into calls differs between runs.
//
// Session errors (target unreachable, timeout, connection reset, a bad
// recording) are results with status "error"; they never stop a run.
package regress

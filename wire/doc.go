// Package wire is where retrace meets wire protocols. Each protocol is a
// package under wire/ (wire/http1, wire/redis, wire/mysql, wire/raw, and
// every later one: wire/postgres, wire/http2, …) that implements
// [Protocol]; nothing outside wire/ parses a protocol. Capture
// (recording/capture), the mock server (mockserver), the downstream diff
// (replayer/diff, replayer/regress) and the reports meet a protocol only
// through this package's interfaces, and find it in a [Registry] (the
// table of every protocol is wire/protocols.All).
//
// # What a protocol package provides
//
// A Protocol value is stateless and safe for concurrent use; it makes the
// per-connection state each side needs:
//
//   - Detect: from the first bytes the client and the server sent, the
//     verdict [Sure], [NotYet] or [No]. Never a guess: a verdict of Sure
//     must be impossible to reach with another protocol's traffic that the
//     package's doc names as in scope (HTTP/1 needs a whole request line
//     ending in "HTTP/1.0" or "HTTP/1.1"; a raw line protocol "GET k t\n"
//     must get No). [Detector] runs every protocol of a registry over a
//     connection and settles on "raw" when none is sure within
//     [DetectBound] bytes, or when every one said No.
//   - NewFramer: incremental framing of one direction: given the bytes
//     buffered so far it returns the length of the whole message at their
//     start, or 0 to wait for more. It never needs the rest of the stream
//     and never waits for bytes a raw protocol would not send.
//   - NewTap: what capture asks about one recorded connection: which trace
//     a write belongs to, whether it starts a new call, whether that call
//     is connection set-up, and whether answer bytes still belong to the
//     current call (see [Tap]).
//   - NewBook and NewAnswerer: the mock server's side. A [Book] learns
//     destination-wide facts from every loaded recording (MySQL: the
//     server greeting, statements prepared anywhere); a [Session] turns
//     one recording's calls to a destination into answerable [Unit]s with
//     their match features ([Request]); an [Answerer] is one live
//     connection's protocol state: the greeting, where each request ends,
//     rewriting a recorded answer for this connection (MySQL statement
//     ids and sequence numbers), answering set-up itself, and the
//     protocol's error for a missing mock.
//   - Decode: a human-readable form of one message ("SET k v", an SQL
//     statement with its typed parameters, an HTTP head with a decoded
//     body) and its named fields, for diffs, reports and grep.
//
// A protocol package knows its protocol and nothing of who uses it: it
// imports the standard library and this package only (or a message codec
// its layout test allows: wire/postgres uses pgx's pgproto3), so the agent
// (which links capture) stays light.
//
// # Concurrency
//
// Protocol values and a Registry are read-only and safe for concurrent
// use. Framers, Taps, Sessions and Answerers belong to one connection (or
// one recording) and are used by one goroutine at a time (capture calls a
// Tap under its connection's lock). A Book is written by Learn under the
// mock server's index lock and read concurrently afterwards: its read
// methods must not modify it.
//
// # Adding a protocol
//
// docs/wire.md has the checklist; wire/wiretest is the conformance kit
// every protocol package passes.
package wire

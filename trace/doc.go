// Package trace owns the identity of a request while a service serves it.
//
// # Trace ids
//
// A trace id ([ValidID], [NewID]) names one recorded or replayed request:
// 1–64 characters of [0-9A-Za-z._-].
//
// # Binding a trace to goroutines
//
// [Bind] attaches a [Trace] to the calling goroutine and returns its
// release. [Current] finds the trace of the calling goroutine:
//
//  1. in a goroutine-id table (a Bind made on this goroutine), then
//  2. in the goroutine's pprof labels: Bind also sets the label
//     [LabelKey] (value: the trace id) next to the application's own
//     labels, and the runtime copies labels into every goroutine started
//     afterwards — plain go statements, errgroup, grandchildren — so
//     handlers need no change.
//
// Lookups take no lock and do not allocate. Labels are reached by linkname
// to runtime/pprof.runtime_getProfLabel and
// runtime_setProfLabel, which the runtime keeps for this use
// (go.dev/issue/67401); their layout (a sorted []struct{Key, Value string},
// Go 1.24 and later) is mirrored here.
//
// Release removes the binding from the table and restores the goroutine's
// labels. Memory does not grow with requests served: after release nothing
// of the trace stays in any table. A goroutine that outlives its request
// still carries the label; it keeps only a small record alive, and Current
// returns nil there: work done after the request ended is charged to no
// request, never to the ended one nor to the next request on the same
// connection.
//
// Inheritance follows goroutine creation, not data flow: work handed to a
// goroutine that already existed (a worker pool fed through a channel, a
// connection's long-lived reader or writer) is not charged to the trace;
// the agent carries the trace in-band where such goroutines matter
// (net/http's client connections).
//
// Labels the application set with pprof.Do before Bind are kept. An
// application that replaces the goroutine's labels after Bind (pprof.Do,
// pprof.SetGoroutineLabels: they set the labels of a context, which never
// holds ours) drops our label: the bound goroutine still finds its trace in
// the table, and the next Current call on it puts the label back next to
// the application's, so goroutines started after that inherit the trace
// again. Goroutines started in between do not see the trace.
//
// # Inbound stream
//
// [InboundParser] follows the bytes a client sends on an accepted
// connection (HTTP/1.x, keep-alive, pipelined, Content-Length and chunked
// bodies), removes every Retrace-* header line before the application
// reads it — also when a line is split across reads at any byte — and
// reports each request's head ([RequestHead]: Retrace-Trace-Id,
// Retrace-Replay-Time, Retrace-Replay-Seed and Retrace-Replay-Random, the
// W3C traceparent trace-id, method and target). Anything that is not
// HTTP/1.x passes through unchanged.
//
// # Randomness
//
// A [Random] is one request's randomness (RETRACE_RANDOM): the seed its
// math/rand and math/rand/v2 draws come from, one SplitMix64 stream per
// package numbered by an atomic counter, and its crypto/rand draws,
// recorded in order or handed back in order on replay, with the
// [Divergence] of each source that left its recording. [ReplaySeed],
// [ParseReplaySeed], [AppendReplayRandom] and [ParseReplayRandom] are the
// codecs of the replay headers (DESIGN.md 3.2); [RandomDst] names the
// mock server's destination for divergence reports (3.3).
//
// # Outbound frames
//
// [AppendFrameHeader], [AppendFrame], [ParseFrameHeader] and [FrameReader]
// encode and decode the frame every write on a redirected outbound
// connection travels in during replay (DESIGN.md 3.3).
package trace

// Package capture turns the traffic the agent's hooks report (hook.Recorder)
// into recording sessions: one per sampled inbound HTTP/1.x request, with
// the raw request and response and every downstream call the request
// caused, and hands finished sessions to a recording.Pipeline.
//
// How bytes become calls:
//
//   - A session starts when the agent has read a request head; its id is a
//     fresh trace.NewID(), unique per request; the W3C traceparent trace id,
//     when the request has one, is kept in Session.Trace (the requests of
//     one distributed trace are sessions of their own, never one id). It ends when the
//     response is complete by HTTP framing (Content-Length, chunked, no
//     body for HEAD/1xx/204/304; a response delimited by the connection's
//     close ends with the close). Requests a client pipelines on one
//     connection (read before the final response to the one before them
//     began) are sessions in progress at once, in a list per connection:
//     each gets its own response, in order; a request read once the
//     response before it has begun ends that session, framed or not.
//   - On a dialled connection a call is a burst of writes followed by the
//     reads that answer it; a write after reads, or a write charged to
//     another trace, starts the next call. Reads may come on any goroutine
//     (net/http's readLoop): on HTTP connections they belong to the current
//     call until its response is complete by framing, and a response that
//     is reported before its request (the reader won the race) waits for
//     it. On other connections, whose clients read on the goroutine that
//     wrote, a read whose goroutine's trace is not the current call's
//     answers a write the agent did not report (a request that was not
//     sampled) and is ignored.
//   - A Redis pipeline (N commands in one write, then N replies) is one call;
//     the mock server splits it per command.
//   - Set-up traffic — the MySQL greeting (the server speaks first) and the
//     authentication exchange, Redis HELLO/AUTH/SELECT/CLIENT/PING/…, SET
//     NAMES and SELECT @@… on MySQL — is marked Setup and kept with the
//     first session that uses the connection, even when the connection was
//     opened before that request (its start offset is then negative).
//   - The protocol of a connection is detected from its first bytes: http,
//     redis, mysql (a protocol-10 greeting) or raw.
//
// Payloads are kept up to the pipeline's MaxPayload; the rest is counted
// but not stored, and the payload is marked truncated. Requests that are not
// sampled cost one Sampler call and no allocation.
package capture

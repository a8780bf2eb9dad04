// Package http1 is HTTP/1.0 and HTTP/1.1 for retrace (wire.Protocol
// "http"): detection from a whole request line ending in HTTP/1.0 or
// HTTP/1.1 (or a response starting "HTTP/1."), the boundaries of requests
// and responses (Content-Length, chunked transfer coding, bodiless
// responses, interim 1xx responses), `Expect: 100-continue`, decoding of
// chunked and gzip bodies, the match features of a request, the error
// response of a missing mock, a decoded form for diffs and reports, and
// masking: header values, query and form fields, bodies under their
// content coding (gzip, deflate, br) as JSON, form or text (MaskMessage,
// MaskBody, also used for HTTP/2 bodies).
// Response (the incremental response framer) is also what the agent uses
// on accepted connections. It parses untrusted bytes and never panics on
// them.
package http1

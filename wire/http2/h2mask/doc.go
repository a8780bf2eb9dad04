// Package h2mask masks recorded HTTP/2 and gRPC calls (recording.Call with
// Proto "http2" or "grpc"): the values of their header fields, the
// query of :path, bodies as HTTP bodies (content codings, JSON, forms,
// text) and gRPC messages' protobuf string fields, in the recorded form
// that wire/http2 writes (http2.AppendMessage), fixing the DATA length,
// gRPC message lengths, protobuf lengths and the response pace a change
// moves.
//
// It reads the recorded form alone, apart from wire/http2's framer, HPACK
// state and protobuf decoding: it imports the standard library, wire and
// wire/http1 only. wire/http2's Protocol (and GRPC) mask through it.
package h2mask

// Package grpc is retrace's knowledge of gRPC over HTTP/2: the
// length-prefixed messages of a stream's data, the status and message of
// its trailers, and a readable form of protobuf messages — by field number
// without a schema, by field name with descriptors (a FileDescriptorSet
// file, as protoc --descriptor_set_out writes it).
//
// A gRPC call is an HTTP/2 stream (package wire/http2 frames it); this
// package reads its payload and never imports grpc-go.
package grpc

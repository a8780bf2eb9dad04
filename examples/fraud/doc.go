// Package fraud is the example fraud-check service, the orders example's
// gRPC downstream: a grpc-go server with a unary method (Check: a verdict
// on an order) and a server-streaming one (Screen: one risk signal per
// order line), the health service (grpc.health.v1) and server reflection.
//
// The messages are real protobuf on the wire, built from a descriptor made
// in code (see schema.go: there is no protoc on the build machines); the
// schema is also available as a descriptor set (FileDescriptorSet) so that
// tools can show the messages by field name.
package fraud

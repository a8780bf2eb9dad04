// Package mockserver is the retrace mock server as a library: it listens for
// the framed downstream traffic that services under replay send
// (DESIGN.md 3.3), reassembles each connection's frames exactly, speaks
// every protocol of wire/protocols (HTTP/1.1, Redis, MySQL, PostgreSQL,
// HTTP/2 and gRPC, and a generic one-frame-one-request protocol), and
// answers every request from the recorded session its trace resolves to:
// the frames' trace, or, on a multiplexed connection (HTTP/2, mux.go), each
// stream's own in-band trace, each stream answered concurrently. Which recorded call answers is decided per trace and
// destination by a chain of matching strategies (Strategy). Requests no
// recording answers get a protocol-correct error and are listed as missing
// mocks. The admin API (api.go) tells the replayer, per trace, every call the
// service made and what answered it.
//
//	srv, err := mockserver.New(mockserver.Config{Listen: "127.0.0.1:3515"})
//	n, err := srv.Load(ctx, source)
//	err = srv.Start()
//	defer srv.Close()
package mockserver

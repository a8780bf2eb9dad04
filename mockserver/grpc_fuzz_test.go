package mockserver_test

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	xhttp2 "golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire/http2"
)

// h2Frames writes frames for the fuzz seeds.
func h2Frames(write func(fr *xhttp2.Framer, enc func(...string) []byte)) []byte {
	var out, hb bytes.Buffer
	fr := xhttp2.NewFramer(&out, nil)
	he := hpack.NewEncoder(&hb)
	enc := func(kv ...string) []byte {
		hb.Reset()
		for i := 0; i+1 < len(kv); i += 2 {
			_ = he.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
		}
		return bytes.Clone(hb.Bytes())
	}
	write(fr, enc)
	return out.Bytes()
}

// FuzzMuxConn sends the client preface and then arbitrary bytes as
// HTTP/2 frames of a connection to a recorded gRPC destination: whatever
// they are, the mock server answers or closes that connection, never
// panics, and a gRPC client's connection beside it keeps being answered.
func FuzzMuxConn(f *testing.F) {
	dst, _, sessions := recordGRPC(f, 1)
	srv := mocktest.NewServer(f, mockserver.Config{ReadTimeout: 50 * time.Millisecond, Admin: "-",
		DstStrategies: map[string][]mockserver.Strategy{dst: {mockserver.StrategyFirst}}}, sessions...)
	cc := mockClient(f, srv, dst)
	unary := func(fr *xhttp2.Framer, enc func(...string) []byte) {
		_ = fr.WriteSettings(xhttp2.Setting{ID: xhttp2.SettingInitialWindowSize, Val: 1 << 20})
		_ = fr.WriteHeaders(xhttp2.HeadersFrameParam{StreamID: 1, EndHeaders: true, BlockFragment: enc(":method", "POST", ":scheme", "http",
			":path", "/grpc.testing.TestService/UnaryCall", ":authority", dst, "content-type", "application/grpc", http2.TraceField, "grpc-00")})
		_ = fr.WriteData(1, true, []byte{0, 0, 0, 0, 3, 0x10, 0x64, 0})
	}
	seeds := [][]byte{
		h2Frames(unary),
		h2Frames(func(fr *xhttp2.Framer, enc func(...string) []byte) {
			unary(fr, enc)
			_ = fr.WriteRSTStream(1, xhttp2.ErrCodeCancel)
			_ = fr.WritePing(false, [8]byte{1})
			_ = fr.WriteWindowUpdate(0, 1<<30)
			_ = fr.WriteGoAway(1, xhttp2.ErrCodeNo, nil)
		}),
		h2Frames(func(fr *xhttp2.Framer, enc func(...string) []byte) {
			_ = fr.WriteHeaders(xhttp2.HeadersFrameParam{StreamID: 3, BlockFragment: enc(":method", "GET", ":path", "/x")})
			_ = fr.WriteContinuation(3, true, enc("a", "b"))
			_ = fr.WriteData(5, false, []byte("idle"))
		}),
		{0, 0, 8, 0xff, 0, 0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8},
		{0xff, 0xff, 0xff, 1, 4, 0, 0, 0, 1},
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		msg := trace.AppendFrameHeader(nil, "", dst, 0)
		msg = trace.AppendFrame(msg, "", dst, append([]byte(http2.ClientPreface), b...))
		c.Write(msg)
		c.(*net.TCPConn).CloseWrite()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatal("connection neither answered nor closed")
				}
				break
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := testpb.NewTestServiceClient(cc).UnaryCall(inTrace(ctx, "grpc-00"), &testpb.SimpleRequest{ResponseSize: 100, Payload: grpctest.Payload([]byte("grpc-00"), 7)}, grpc.WaitForReady(true)); err != nil {
			t.Fatalf("the connection beside: %v", err)
		}
	})
}

package http2_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"reflect"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/http2"
)

func TestRecordedForm(t *testing.T) {
	f := func(kv ...string) []hpack.HeaderField {
		out := []hpack.HeaderField{}
		for i := 0; i < len(kv); i += 2 {
			out = append(out, hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		m    http2.Message
		pace []http2.Mark
	}{
		{name: "request", m: http2.Message{Header: f(":method", "POST", ":path", "/a.B/C", "x-v", "a: b"), Data: []byte("\x00\x00\x00\x00\x02\x08\x01\r\n\r\n")}},
		{name: "response with trailer and pace", m: http2.Message{Interim: [][]hpack.HeaderField{f(":status", "100")}, Header: f(":status", "200"), Data: []byte("x"), Trailer: f("grpc-status", "0")}, pace: []http2.Mark{{Request: 3, Response: 1}}},
		{name: "trailers only", m: http2.Message{Header: f(":status", "200", "grpc-status", "5")}},
		{name: "empty trailer", m: http2.Message{Header: f(":status", "200"), Trailer: f()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := http2.AppendMessage(nil, tc.m, tc.pace)
			m, pace, err := http2.ParseMessage(b)
			if err != nil {
				t.Fatalf("%q: %v", b, err)
			}
			tc.m.End = true
			if !reflect.DeepEqual(m, tc.m) || !reflect.DeepEqual(pace, tc.pace) {
				t.Fatalf("%q read back as %+v %v", b, m, pace)
			}
		})
	}
	for _, bad := range []string{"", ":path /x\r\n\r\nDATA 1\r\n", "\r\nDATA 5\r\nab", "\r\nDATA 0\r\nx: y\r\n", "\r\nPACE 1\r\nDATA 0\r\n"} {
		if _, _, err := http2.ParseMessage([]byte(bad)); !errors.Is(err, http2.ErrRecorded) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
}

func FuzzParseMessage(f *testing.F) {
	f.Add(http2.AppendMessage(nil, http2.Message{Header: []hpack.HeaderField{{Name: ":status", Value: "200"}}, Data: []byte("ab"), Trailer: []hpack.HeaderField{{Name: "grpc-status", Value: "0"}}}, []http2.Mark{{Request: 1, Response: 2}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, pace, err := http2.ParseMessage(b)
		if err != nil {
			return
		}
		again, pace2, err := http2.ParseMessage(http2.AppendMessage(nil, m, pace))
		if err != nil || !reflect.DeepEqual(again, m) || !reflect.DeepEqual(pace, pace2) {
			t.Fatalf("%+v did not round-trip: %+v %v", m, again, err)
		}
	})
}

// serialCalls makes the calls a serial Answerer can answer (each request
// ends before its answer starts): unary, a status, server-streaming,
// health.
func serialCalls(ctx context.Context, cc *grpc.ClientConn, tag string) error {
	ctx = metadata.AppendToOutgoingContext(ctx, "x-trace", tag, http2.TraceField, tag)
	c := testpb.NewTestServiceClient(cc)
	seed := []byte(tag)
	r, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 40000, Payload: grpctest.Payload(seed, len(seed))})
	if err != nil || !bytes.Equal(r.GetPayload().GetBody(), grpctest.Payload(seed, 40000).Body) {
		return fmt.Errorf("UnaryCall %s: %v", tag, err)
	}
	_, err = c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: grpctest.Payload(seed, len(seed)), ResponseStatus: &testpb.EchoStatus{Code: int32(codes.NotFound), Message: "no " + tag}})
	if st, _ := status.FromError(err); st.Code() != codes.NotFound || st.Message() != "no "+tag {
		return fmt.Errorf("UnaryCall %s with status: %v", tag, err)
	}
	ss, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{Payload: grpctest.Payload(seed, len(seed)), ResponseParameters: []*testpb.ResponseParameters{{Size: 5}, {Size: 90000}}})
	if err != nil {
		return err
	}
	for _, size := range []int{5, 90000} {
		m, err := ss.Recv()
		if err != nil || !bytes.Equal(m.GetPayload().GetBody(), grpctest.Payload(seed, size).Body) {
			return fmt.Errorf("StreamingOutputCall %s: %v", tag, err)
		}
	}
	if _, err := ss.Recv(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("StreamingOutputCall %s end: %v", tag, err)
	}
	return nil
}

// TestAnswerer records serial calls of 32 traces over one connection,
// turns each stream into a recorded call (wire.Call in the recorded form),
// and has a real grpc-go client make them again against the Protocol's
// Answerer, driven as the mock server drives one: buffer, Next, answer
// from the request's trace (Owner), Reply.
func TestAnswerer(t *testing.T) {
	const n = 32
	tags := make([]string, n)
	for i := range tags {
		tags[i] = fmt.Sprintf("ans-%02d", i)
	}
	l := listenTap(t)
	grpctest.Serve(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runAll := func(addr string) {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for _, tag := range tags {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := serialCalls(ctx, cc, tag); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		cc.Close()
	}
	runAll(l.Addr().String())
	time.Sleep(20 * time.Millisecond)
	xs := feedLog(t, l.taps()[0].chunks(), rand.New(rand.NewPCG(9, 9)), 8192)

	// The recording: per trace, its calls in order.
	sortByStream(xs)
	calls := map[string][]wire.Call{}
	for _, x := range xs {
		tid, _ := http2.Get(x.Request.Header, http2.TraceField)
		calls[tid] = append(calls[tid], wire.Call{
			Request:  http2.AppendMessage(nil, x.Request, nil),
			Response: http2.AppendMessage(nil, x.Response, x.Pace),
			Seq:      len(calls[tid]),
		})
	}
	// Decoded form of one recorded call.
	d, ok := http2.Protocol.Decode(wire.Server, calls[tags[0]][0].Response)
	if !ok || d.Text == "" {
		t.Fatalf("decode: %+v", d)
	}

	var mu sync.Mutex
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ml.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		sess := http2.Protocol.NewSession(http2.Protocol.NewBook())
		a := http2.Protocol.NewAnswerer(wire.Env{Book: http2.Protocol.NewBook(), MaxMessage: 1 << 20, TraceID: func() string { return "" }})
		var buf []byte
		rb := make([]byte, 32<<10)
		for {
			k, err := c.Read(rb)
			if err != nil {
				return
			}
			buf = append(buf, rb[:k]...)
			var out []byte
			for {
				r, used, interim, err := a.Next(buf)
				out = append(out, interim...)
				if err != nil {
					c.Write(out)
					return
				}
				if used == 0 {
					break
				}
				switch {
				case r.Local:
					out = append(out, a.Synth(&r)...)
				default:
					mu.Lock()
					left := calls[r.Owner]
					var resp []byte
					for i, call := range left {
						u := sess.Units(call)[0]
						if u.Req.Op == r.Op && bytes.Equal(u.Req.Body, r.Body) {
							resp = u.Resp
							calls[r.Owner] = append(left[:i:i], left[i+1:]...)
							break
						}
					}
					mu.Unlock()
					if resp == nil {
						out = append(out, a.Missing(&r, "no recorded call for "+r.Owner+" "+r.Op)...)
					} else {
						out = append(out, a.Reply(&r, resp)...)
					}
				}
				buf = buf[used:]
			}
			if _, err := c.Write(out); err != nil {
				return
			}
		}
	}()
	runAll(ml.Addr().String())
	ml.Close()
	wg.Wait()
	for tid, left := range calls {
		if len(left) > 0 {
			t.Errorf("%s: %d recorded calls not replayed", tid, len(left))
		}
	}
}

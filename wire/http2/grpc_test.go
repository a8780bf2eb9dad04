package http2_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/proto"

	"github.com/retrace-dev/retrace/internal/grpctest"
	grpcwire "github.com/retrace-dev/retrace/wire/grpc"
	"github.com/retrace-dev/retrace/wire/http2"
)

// recordGRPC runs grpctest.Exercise for tags over one ClientConn against a
// real grpc-go server and returns the bytes of the connection.
func recordGRPC(t testing.TB, tags []string, opts ...grpc.DialOption) *tapConn {
	t.Helper()
	l := listenTap(t)
	grpctest.Serve(t, l)
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	cc, err := grpc.NewClient(l.Addr().String(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make(chan error, len(tags))
	for _, tag := range tags {
		go func() {
			_, err := grpctest.Exercise(ctx, cc, tag)
			errs <- err
		}()
	}
	for range tags {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := cc.Close(); err != nil {
		t.Fatal(err)
	}
	taps := l.taps()
	if len(taps) != 1 {
		t.Fatalf("%d connections, want 1", len(taps))
	}
	time.Sleep(50 * time.Millisecond) // the server's last writes (GOAWAY) after the client's close
	return taps[0]
}

func TestGRPCExchanges(t *testing.T) {
	tags := make([]string, 8)
	for i := range tags {
		tags[i] = fmt.Sprintf("trace-%02d", i)
	}
	tap := recordGRPC(t, tags)
	client, server := tap.bytes()
	for _, piece := range []int{1, 7, 4096, 1 << 20} {
		t.Run(fmt.Sprintf("pieces of up to %d", piece), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(piece), 1))
			xs := feedSplit(t, client, server, rng, piece)
			checkGRPCExchanges(t, xs, tags)
		})
	}
	t.Run("in order", func(t *testing.T) {
		xs := feedLog(t, tap.chunks(), rand.New(rand.NewPCG(5, 6)), 100)
		checkGRPCExchanges(t, xs, tags)
	})
}

// checkGRPCExchanges checks that every call Exercise made for every tag is
// one finished exchange whose messages are what the client and server
// sent.
func checkGRPCExchanges(t *testing.T, xs []*http2.Exchange, tags []string) {
	t.Helper()
	byTag := map[string][]*http2.Exchange{}
	for _, x := range xs {
		if x.Unfinished != "" || x.Reset != nil {
			t.Fatalf("stream %d %s: unfinished %q reset %v", x.StreamID, x.Path(), x.Unfinished, x.Reset)
		}
		if !x.IsGRPC() {
			t.Fatalf("stream %d: not gRPC: %v", x.StreamID, x.Request.Header)
		}
		tag, _ := http2.Get(x.Request.Header, "x-trace")
		byTag[tag] = append(byTag[tag], x)
	}
	for _, tag := range tags {
		got := byTag[tag]
		sort.Slice(got, func(i, j int) bool { return got[i].StreamID < got[j].StreamID })
		var paths []string
		for _, x := range got {
			paths = append(paths, x.Path())
		}
		want := []string{"/grpc.testing.TestService/UnaryCall", "/grpc.testing.TestService/UnaryCall",
			"/grpc.testing.TestService/StreamingOutputCall", "/grpc.testing.TestService/FullDuplexCall",
			"/grpc.health.v1.Health/Check"}
		if fmt.Sprint(paths) != fmt.Sprint(want) {
			t.Fatalf("%s: calls %v, want %v", tag, paths, want)
		}
		seed := []byte(tag)
		checkMessages(t, got[0], 1, []proto.Message{&testpb.SimpleResponse{Payload: grpctest.Payload(seed, 100), Username: "retrace"}}, 0, "")
		checkMessages(t, got[1], 1, nil, 5, "no "+tag)
		checkMessages(t, got[2], 1, []proto.Message{
			&testpb.StreamingOutputCallResponse{Payload: grpctest.Payload(seed, 3)},
			&testpb.StreamingOutputCallResponse{Payload: grpctest.Payload(seed, 70000)},
			&testpb.StreamingOutputCallResponse{Payload: grpctest.Payload(seed, 1)},
		}, 0, "")
		checkMessages(t, got[3], 3, []proto.Message{
			&testpb.StreamingOutputCallResponse{Payload: grpctest.Payload(seed, 7)},
			&testpb.StreamingOutputCallResponse{Payload: grpctest.Payload(seed, 14)},
			&testpb.StreamingOutputCallResponse{Payload: grpctest.Payload(seed, 21)},
		}, 0, "")
		if v, _ := http2.Get(got[0].Response.Header, "x-trace"); v != tag {
			t.Fatalf("%s: response header x-trace %q", tag, v)
		}
		if v, _ := http2.Get(got[0].Response.Trailer, "x-trace-end"); v != tag {
			t.Fatalf("%s: trailer x-trace-end %q", tag, v)
		}
	}
}

func checkMessages(t *testing.T, x *http2.Exchange, requests int, want []proto.Message, code int, msg string) {
	t.Helper()
	in, rest, err := grpcwire.Split(x.Request.Data, 0)
	if err != nil || len(rest) != 0 || len(in) != requests {
		t.Fatalf("stream %d %s: %d request messages (rest %d, %v), want %d", x.StreamID, x.Path(), len(in), len(rest), err, requests)
	}
	out, rest, err := grpcwire.Split(x.Response.Data, 0)
	if err != nil || len(rest) != 0 || len(out) != len(want) {
		t.Fatalf("stream %d %s: %d response messages (rest %d, %v), want %d", x.StreamID, x.Path(), len(out), len(rest), err, len(want))
	}
	for i, w := range want {
		got := w.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(out[i].Data, got); err != nil || !proto.Equal(got, w) {
			t.Fatalf("stream %d %s: response message %d differs (%v)", x.StreamID, x.Path(), i, err)
		}
	}
	st, ok, err := grpcwire.StatusOf(x.Response.Header, x.Response.Trailer)
	if err != nil || !ok || st.Code != code || st.Message != msg {
		t.Fatalf("stream %d %s: status %+v %v %v, want %d %q", x.StreamID, x.Path(), st, ok, err, code, msg)
	}
}

package hook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/retrace-dev/retrace/trace"
)

// GRPCTraceKey is the metadata key that carries a trace id on a gRPC call:
// added by the agent to the service's own outbound calls, and sent by the
// replayer on inbound ones (DESIGN.md 12).
const GRPCTraceKey = "retrace-trace-id"

// grpc-go keeps a call's outgoing metadata in its context; its transport
// reads it, on the caller's goroutine, through the unexported
// metadata.fromOutgoingContextRaw (reached through a function variable, so
// never inlined there). Patching that function lets the agent add the
// caller's trace to each call's headers without importing grpc-go: the
// stream carries its own trace, whichever goroutine (grpc-go's loopy
// writer) later writes its frames.
const grpcRawName = "google.golang.org/grpc/metadata.fromOutgoingContextRaw"

// errNotLinked: the program does not use the package a patch is for.
var errNotLinked = errors.New("not linked into the program")

// grpcMD is the layout of grpc-go's metadata.rawMD, checked with reflect
// the first time one is read.
type grpcMD struct {
	md    map[string][]string
	added [][]string
}

// grpcKey is the context key of grpc-go's outgoing metadata (a value of
// its unexported mdOutgoingKey type), learnt once before patching.
var grpcKey atomic.Pointer[any]

// grpcMDType is metadata.rawMD's type once checked to have grpcMD's
// layout.
var grpcMDType atomic.Pointer[reflect.Type]

// keySpy is a context that remembers the key it is asked for.
type keySpy struct {
	context.Context
	key any
}

func (s *keySpy) Value(key any) any {
	s.key = key
	return nil
}

// grpcTarget finds fromOutgoingContextRaw, and learns the key it reads by
// calling it once, unpatched, with a context that notes what it is asked.
func grpcTarget() (target, error) {
	pcs, err := funcsByName(grpcRawName)
	if err != nil {
		return target{}, err
	}
	if pcs[0] == 0 {
		return target{}, fmt.Errorf("%s: %w", grpcRawName, errNotLinked)
	}
	word := new(uintptr)
	*word = pcs[0]
	orig := funcOf[func(context.Context) (map[string][]string, [][]string, bool)](unsafe.Pointer(word))
	spy := &keySpy{Context: context.Background()}
	if _, _, ok := orig(spy); ok || spy.key == nil {
		return target{}, fmt.Errorf("%w: %s does not read its metadata with one context key", ErrUnsupported, grpcRawName)
	}
	kt := reflect.TypeOf(spy.key)
	if kt.PkgPath() != "google.golang.org/grpc/metadata" || kt.Size() != 0 {
		return target{}, fmt.Errorf("%w: %s reads key of type %v, not grpc-go's metadata key", ErrUnsupported, grpcRawName, kt)
	}
	key := spy.key
	grpcKey.Store(&key)
	return target{name: grpcRawName, word: unsafe.Pointer(word), double: grpcOutgoingRaw}, nil
}

// checkGRPCMD reports whether t, a value stored under grpcKey, is
// grpc-go's rawMD with grpcMD's layout.
func checkGRPCMD(t reflect.Type) bool {
	if p := grpcMDType.Load(); p != nil {
		return *p == t
	}
	want := reflect.TypeFor[grpcMD]()
	if t.Kind() != reflect.Struct || t.PkgPath() != "google.golang.org/grpc/metadata" || t.NumField() != want.NumField() || t.Size() != want.Size() {
		return false
	}
	for i := range want.NumField() {
		f, w := t.Field(i), want.Field(i)
		if f.Name != w.Name || f.Offset != w.Offset || f.Type.Kind() != w.Type.Kind() {
			return false
		}
	}
	if m := t.Field(0).Type; m.Key().Kind() != reflect.String || m.Elem() != reflect.TypeFor[[]string]() || t.Field(1).Type != reflect.TypeFor[[][]string]() {
		return false
	}
	grpcMDType.Store(&t)
	return true
}

// grpcOutgoingRaw replaces metadata.fromOutgoingContextRaw: what the
// original returns, plus the calling goroutine's trace under GRPCTraceKey
// (unless the call already carries one).
func grpcOutgoingRaw(ctx context.Context) (md map[string][]string, added [][]string, ok bool) {
	md, added, ok = grpcRawMD(ctx)
	e := active.Load()
	if e == nil || e.cfg.Mode == Record && e.h2Broken.Load() {
		return md, added, ok
	}
	tid := trace.CurrentID()
	if tid == "" || !trace.ValidID(tid) {
		return md, added, ok
	}
	if carriesTrace(md, added) {
		return md, added, ok
	}
	counters.carried.Add(1)
	// A new slice: added belongs to the context, which other calls share.
	return md, append(added[:len(added):len(added)], []string{GRPCTraceKey, tid}), true
}

// grpcRawMD does what the original does: the rawMD stored under the key.
func grpcRawMD(ctx context.Context) (map[string][]string, [][]string, bool) {
	k := grpcKey.Load()
	if k == nil || ctx == nil {
		return nil, nil, false
	}
	v := ctx.Value(*k)
	if v == nil || !checkGRPCMD(reflect.TypeOf(v)) {
		return nil, nil, false
	}
	md := (*grpcMD)((*[2]unsafe.Pointer)(unsafe.Pointer(&v))[1])
	return md.md, md.added, true
}

func carriesTrace(md map[string][]string, added [][]string) bool {
	if _, set := md[GRPCTraceKey]; set {
		return true
	}
	for _, kv := range added {
		for i := 0; i+1 < len(kv); i += 2 {
			if strings.EqualFold(kv[i], GRPCTraceKey) {
				return true
			}
		}
	}
	return false
}

// grpc-go (1.8x) reads its connections, client and server, through
// syscall.RawConn with its own syscall.Read when the connection is a
// *net.TCPConn (readyreader.NewNonBlocking): those reads never pass
// net.(*conn).Read, so the agent would see what grpc-go writes and nothing
// it reads. NewNonBlocking returns nil when it cannot read so (a
// connection wrapped by credentials), and grpc-go then reads through a
// bufio.Reader on the connection, as it did before and does with
// GRPC_GO_EXPERIMENTAL_HTTP_FRAMER_READ_BUFFER_POOLING=false; the double
// always returns nil.
const grpcReadyName = "google.golang.org/grpc/internal/transport/readyreader.NewNonBlocking"

func grpcReadTarget() (target, error) {
	pcs, err := funcsByName(grpcReadyName)
	if err != nil {
		return target{}, err
	}
	if pcs[0] == 0 {
		return target{}, fmt.Errorf("%s: %w", grpcReadyName, errNotLinked)
	}
	word := new(uintptr)
	*word = pcs[0]
	return target{name: grpcReadyName, word: unsafe.Pointer(word), double: grpcNoRawReads}, nil
}

// grpcNoRawReads replaces readyreader.NewNonBlocking(io.Reader) Reader:
// the result, an interface, is returned as an any of the same two words,
// nil.
func grpcNoRawReads(io.Reader) any { return nil }

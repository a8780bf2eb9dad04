package hook

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"sync"
	"unsafe"

	"github.com/retrace-dev/retrace/trace"
)

// net/http's HTTP/2 server (bundled in net/http, and golang.org/x/net/http2,
// which h2c.NewHandler uses) reads a connection's frames on one goroutine
// and starts every stream's handler from another (its serve loop), so the
// binding the read hook makes on the reading goroutine (h2.go) never
// reaches a handler; worse, the serve loop may carry the trace of the
// stream whose headers came in its first read. Every connection the
// servers serve passes serverConnBaseContext (serveConn calls it first,
// before it reads the options' handler; ServeConn itself is inlined by its
// callers). Its double does what the original does — the connection's base
// context from the options' context, with the local address and the
// server — and wraps the options' handler. The wrapper runs on each
// handler's goroutine, learns the stream from the ResponseWriter (the
// servers' *responseWriter, whose rws.stream.id it reads through reflect,
// checked by name and type) and binds the trace the read hook saw on that
// stream (or no trace), so that the handler and the goroutines it starts
// run in the stream's trace.
const (
	h2StdBaseContext = "net/http.http2serverConnBaseContext"
	h2XBaseContext   = "golang.org/x/net/http2.serverConnBaseContext"
)

// h2ServeOpts is the start of http2ServeConnOpts (x/net's ServeConnOpts),
// the fields the double reads and writes; the rest is never touched.
type h2ServeOpts struct {
	Context    context.Context
	BaseConfig *http.Server
	Handler    http.Handler
}

func h2ServeTargets() ([]target, error) {
	names := []string{h2StdBaseContext, h2XBaseContext}
	pcs, err := funcsByName(names...)
	if err != nil {
		return nil, err
	}
	var ts []target
	for i, pc := range pcs {
		if pc == 0 {
			continue
		}
		w := new(uintptr)
		*w = pc
		ts = append(ts, target{name: names[i], word: unsafe.Pointer(w), double: h2BaseContext})
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("net/http's HTTP/2 server: %w", errNotLinked)
	}
	return ts, nil
}

// h2BaseContext replaces serverConnBaseContext(c net.Conn, opts
// *ServeConnOpts) (context.Context, func()).
func h2BaseContext(c net.Conn, opts *h2ServeOpts) (context.Context, func()) {
	if e := active.Load(); e != nil && opts != nil {
		e.wrapH2Handler(opts)
	}
	parent := context.Background()
	hs := new(http.Server)
	if opts != nil {
		if opts.Context != nil {
			parent = opts.Context
		}
		if opts.BaseConfig != nil {
			hs = opts.BaseConfig
		}
	}
	ctx, cancel := context.WithCancel(parent)
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, c.LocalAddr())
	ctx = context.WithValue(ctx, http.ServerContextKey, hs)
	return ctx, cancel
}

// wrapH2Handler puts the options' handler in an h2Handler, once (a caller
// may serve several connections with one options struct; the wrapper
// knows each request's connection by its addresses).
func (e *engine) wrapH2Handler(opts *h2ServeOpts) {
	defer func() {
		if r := recover(); r != nil {
			e.recovered("h2-serve-conn", r)
		}
	}()
	if _, ok := opts.Handler.(*h2Handler); ok {
		return
	}
	h := opts.Handler
	if h == nil { // as the server picks it
		if opts.BaseConfig != nil && opts.BaseConfig.Handler != nil {
			h = opts.BaseConfig.Handler
		} else {
			h = http.DefaultServeMux
		}
	}
	opts.Handler = &h2Handler{h: h}
}

// h2Handler is a connection's handler, run in each stream's trace.
type h2Handler struct{ h http.Handler }

func (w *h2Handler) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	if active.Load() != nil {
		if t := streamTrace(rw, req); t != nil {
			rel := trace.Bind(t)
			counters.bound.Add(1)
			if !t.ReplayTime.IsZero() {
				rel = withReplayClock(rel)
			}
			defer rel()
		}
	}
	w.h.ServeHTTP(rw, req)
}

// streamTrace returns the trace of rw's stream (an empty ID for none), or
// nil when the agent does not follow the connection: the request's
// RemoteAddr and the local address the server put in its context (in
// serverConnBaseContext) name it.
func streamTrace(rw http.ResponseWriter, req *http.Request) (t *trace.Trace) {
	defer func() {
		if r := recover(); r != nil {
			if e := active.Load(); e != nil {
				e.recovered("h2-handler", r)
			}
			t = nil
		}
	}()
	local, _ := req.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if local == nil {
		return nil
	}
	v, ok := h2Conns.Load(h2Key(req.RemoteAddr, local.String()))
	if !ok {
		return nil
	}
	id, ok := h2StreamID(rw)
	if !ok {
		if e := active.Load(); e != nil {
			e.reportOnce("h2-stream-id", "an HTTP/2 handler's ResponseWriter does not name its stream; its handlers run in no trace", "type", reflect.TypeOf(rw).String())
		}
		return &trace.Trace{}
	}
	h := v.(*h2In)
	h.mu.Lock()
	t = h.traces[id]
	h.mu.Unlock()
	if t == nil {
		t = &trace.Trace{}
	}
	return t
}

// h2RWPaths caches, per ResponseWriter type, the field indices that lead
// to its stream id (rws.stream.id), or nil for a type that has none.
var h2RWPaths sync.Map // reflect.Type → []int (rws, stream, id), or nil

// h2StreamID returns the stream of an HTTP/2 server's ResponseWriter.
func h2StreamID(rw http.ResponseWriter) (uint32, bool) {
	rt := reflect.TypeOf(rw)
	p, ok := h2RWPaths.Load(rt)
	if !ok {
		p = h2RWPath(rt)
		h2RWPaths.Store(rt, p)
	}
	path, _ := p.([]int)
	if path == nil {
		return 0, false
	}
	v := reflect.ValueOf(rw).Elem().Field(path[0])
	if v.IsNil() {
		return 0, false
	}
	v = v.Elem().Field(path[1])
	if v.IsNil() {
		return 0, false
	}
	return uint32(v.Elem().Field(path[2]).Uint()), true
}

// h2RWPath finds rws.stream.id in a ResponseWriter type: pointers to
// structs down to a uint32, or nil.
func h2RWPath(rt reflect.Type) []int {
	var path []int
	for _, name := range []string{"rws", "stream"} {
		if rt.Kind() != reflect.Pointer || rt.Elem().Kind() != reflect.Struct {
			return nil
		}
		f, ok := rt.Elem().FieldByName(name)
		if !ok || len(f.Index) != 1 {
			return nil
		}
		path = append(path, f.Index[0])
		rt = f.Type
	}
	if rt.Kind() != reflect.Pointer || rt.Elem().Kind() != reflect.Struct {
		return nil
	}
	f, ok := rt.Elem().FieldByName("id")
	if !ok || len(f.Index) != 1 || f.Type.Kind() != reflect.Uint32 {
		return nil
	}
	return append(path, f.Index[0])
}

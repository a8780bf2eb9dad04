package hook

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/retrace-dev/retrace/internal/cowmap"
	"github.com/retrace-dev/retrace/trace"
)

// active is the engine the patched functions consult; nil when the hooks
// are off (not installed, or being removed), in which case every double
// behaves exactly like the function it replaces.
var active atomic.Pointer[engine]

// netLayoutP holds the layout of net's internals, stored before the first
// patch (always the same value); doubles load it atomically because a
// goroutine may still run a double of an earlier Install.
var netLayoutP atomic.Pointer[netLayout]

// denseIndex lets engines keep connection indexes in netFD padding (see
// connTable); tests turn it off to run the hooks as on a Go release whose
// netFD has no padding.
var denseIndex = true

// engine is one Install: its configuration and its connections.
type engine struct {
	cfg   *resolvedConfig
	l     *netLayout
	log   *slog.Logger
	clock bool // time.Now is patched: Arrived uses realNow
	tls   bool // crypto/tls is hooked: HTTPS requests may carry their trace in-band

	random                     RandomMode
	mathPatched, cryptoPatched bool // the sources of RETRACE_RANDOM that are patched
	randomRec                  RandomRecorder
	streamRec                  StreamRecorder // the Recorder's, nil when it records no HTTP/2 (h2record.go)
	div                        divergenceReporter
	tlsFacts                   tlsFactsClient // replay: recorded TLS states (tlsfacts.go)

	conns    connTable
	connects pendingConnects
	names    nameTable // logical destinations (resolve.go)
	tlsOther sync.Map  // TLS connections over other net.Conns (otherTLSState), by address
	nextID   atomic.Uint64
	reported sync.Map // report keys already logged
	// h2Broken is set once an outbound HTTP/2 rewriter failed (h2out.go):
	// record mode's grpc-go calls and net/http requests stop carrying
	// their trace in-band.
	h2Broken atomic.Bool
}

func newEngine(cfg *resolvedConfig, l *netLayout) *engine {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	e := &engine{cfg: cfg, l: l, log: log, random: cfg.Random}
	e.randomRec, _ = cfg.Recorder.(RandomRecorder)
	e.streamRec, _ = cfg.Recorder.(StreamRecorder)
	e.div.addr = cfg.mock.String()
	e.tlsFacts.addr = e.div.addr
	if denseIndex {
		e.conns.tag = l.tag
	}
	e.connects.m = map[int]string{}
	return e
}

// reportOnce logs msg at error level the first time key is reported.
func (e *engine) reportOnce(key, msg string, args ...any) {
	if _, dup := e.reported.LoadOrStore(key, true); dup {
		return
	}
	e.log.Error("retrace: "+msg, args...)
}

// debugOnce logs msg at debug level the first time key is seen, when debug
// logging is on (the check keeps the common path free of the map).
func (e *engine) debugOnce(key, msg string, args ...any) {
	if !e.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	if _, dup := e.reported.LoadOrStore(key, true); dup {
		return
	}
	e.log.Debug("retrace: "+msg, args...)
}

// recovered counts and reports (once per place) a panic caught in a hook.
func (e *engine) recovered(where string, r any) {
	counters.failures.Add(1)
	if _, dup := e.reported.Load("panic:" + where); dup {
		return // don't pay for a stack trace that will not be logged
	}
	e.reportOnce("panic:"+where, "hook panicked; the application's I/O proceeds unhooked",
		"where", where, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
}

// now is the real clock, also while time.Now is patched.
func (e *engine) now() time.Time {
	if e.clock {
		return realNow()
	}
	return time.Now()
}

// connState is what the agent keeps about one TCP (or Unix stream)
// connection between its first Read/Write and its Close. The state of a
// connection is touched once or twice per request, by then mostly out of
// the cache, so the fields are laid out by who reads them: every hooked
// Read and Write reads the flags of the first line; an inbound request
// reads and writes the read side and the serving state, which follow them
// in the same two lines; the write side of outbound connections and what
// only set-up or a sampled request reads come after. Its size is a
// multiple of 64 on 64-bit platforms (TestConnStateLayout), a size class
// whose objects are 64-byte aligned, so the lines are the same for every
// connection.
type connState struct {
	key     uintptr // address of the netFD
	inbound bool
	// redirect is set for an outbound connection that replay mode sent to
	// the mock server; dst is where the application meant it to go.
	redirect bool
	// broken is set after a hook panicked on this connection: from then on
	// its bytes pass unchanged (framed with no trace when redirected). It
	// is also set on a connection that carries TLS whose plaintext the TLS
	// hooks follow (tlsSt): its own bytes are not reported.
	broken atomic.Bool
	// passed is set once the outbound stream gave up on HTTP (and holds
	// nothing): writes then skip it (see publish).
	passed atomic.Bool
	// quietHTTP is set while the request last written on an outbound HTTP
	// connection has no trace: record mode reports neither it nor its
	// answer (see outWriter.record).
	quietHTTP atomic.Bool
	preamble  atomic.Bool // the preamble frame has been sent (set under wmu)
	// untraced counts the writes with no trace reported on an outbound
	// connection whose bytes skip the stream (see setupWrite).
	untraced atomic.Int32
	// gone is set when the state leaves the table (see connTable.get).
	gone atomic.Bool
	// tls marks the state of a TLS connection (see tls.go): its own bytes
	// are the plaintext, read and written through tc.
	tls bool

	rmu     sync.Mutex // read side: rd, pending
	rd      *stream    // inbound: the request parser
	pending []byte     // parsed bytes that did not fit the reader's buffer
	// h2 is an inbound connection's HTTP/2 state (h2.go): nil before its
	// first read (or a provisional state of the server's early writes),
	// h2Not once it is not HTTP/2. Next to rd: every inbound read loads it.
	h2 atomic.Pointer[h2In]

	cur atomic.Pointer[trace.Trace] // inbound: trace of the current request, nil for none
	srv serving                     // inbound: the request being served, those waiting (serving.go)

	wmu  sync.Mutex // write side: wr, preamble, wbuf
	wr   *stream    // outbound: strips the in-band Retrace-Trace-Id
	wbuf []byte
	// h2w is a dialled connection's HTTP/2 state in record mode
	// (h2out.go): nil before its first write, h2OutNot once it is not
	// HTTP/2. Set under wmu.
	h2w atomic.Pointer[h2Out]

	gen  uint64
	idx  uint32 // index of its entry in connTable.dense; 0 for none
	info ConnInfo
	dst  string

	tc    unsafe.Pointer            // the *tls.Conn of a TLS connection's state
	tlsSt atomic.Pointer[connState] // the TLS connection over this one, if any

	_ [connStatePad]byte
}

// connStatePad rounds connState up to 448 bytes on 64-bit platforms.
const connStatePad = 48 * (^uintptr(0) >> 63)

// publish sets passed once the outbound stream has given up on HTTP;
// called under wmu after a feed.
func (st *connState) publish() {
	if !st.passed.Load() && st.wr.passThrough() {
		st.passed.Store(true)
	}
}

// setupUntraced is how many writes with no trace record mode reports on
// an outbound connection that carries no HTTP. They are the connection's
// set-up, as often as not: a pool opens connections on a goroutine of its
// own (database/sql's connectionOpener, go-redis's pool) or before any
// request, and the driver authenticates and sets session variables there.
// The recorder keeps them for the connection's first sampled request.
// Past them, untraced writes (requests not sampled) are not reported, so
// unsampled traffic costs the recorder nothing.
const setupUntraced = 16

// setupWrite reports whether an untraced write on the connection is to be
// reported (one of its first setupUntraced). The count goes one past the
// limit, with the first write not reported (see skipRead). Writers of one
// connection take turns, so a plain load and add is enough (a race only
// miscounts by one); past that it is a load.
//
// The write that takes the count past the limit marks the connection quiet
// in t (see connTable.markQuiet): from then on skipRead says yes to every
// untraced read, and this says no to every untraced write.
func (st *connState) setupWrite(t *connTable) bool {
	n := st.untraced.Load()
	if n <= setupUntraced {
		st.untraced.Store(n + 1)
		if n == setupUntraced {
			t.markQuiet(st)
		}
	}
	return n < setupUntraced
}

// skipRead reports whether record mode leaves an outbound read unreported:
// on a connection that carries no HTTP, once an untraced write has gone
// unreported, a read on a goroutine with no trace. Clients of these
// protocols read an answer on the goroutine that wrote its request, so the
// bytes answer a write that was not reported (a request not sampled); the
// recorder would only have looked them up to drop them. On an HTTP
// connection, a read while the request last written has no trace: HTTP/1
// clients read a response whole before they write the next request.
func (st *connState) skipRead() bool {
	if st.quietHTTP.Load() {
		return true
	}
	return st.untraced.Load() > setupUntraced && st.passed.Load() && trace.CurrentID() == ""
}

func (st *connState) tid() string {
	if t := st.cur.Load(); t != nil {
		return t.ID
	}
	return ""
}

// connTable maps netFD addresses to connection state. Keys are addresses,
// not pointers, so the table never keeps a netFD alive; an entry is removed
// on Close, or by a runtime cleanup when the netFD is collected unclosed
// (checked by generation, since the address may be reused by then).
//
// Every hooked Read and Write looks its connection up. Each connection has
// an entry in dense, a table of consecutive small indexes, and its netFD
// keeps the index in four bytes of its alignment padding (netLayout.tag),
// in a line that net does not write once the connection is set up; the
// entries of the connections in use share a few cache lines, where a hash
// of the address spreads them over many. An entry also says whether the
// connection is quiet (see markQuiet), which settles most of a service's
// downstream Reads and Writes without the connection's state. Where the netFD has no
// padding (another Go release) or dense is full, a cowmap, whose lookups
// take no lock, stands behind recent, which holds the state last found in
// each of its slots (by address).
type connTable struct {
	tag    uintptr // netLayout.tag; 0: netFDs carry no index
	dense  denseTable
	recent [recentSlots]atomic.Pointer[connState]
	m      cowmap.Map[uintptr, *connState]
	create sync.Mutex // serialises creation (a pending connect is taken once) and dense's free list
	count  atomic.Int64
}

const recentBits = 11
const recentSlots = 1 << recentBits

func (t *connTable) slot(key uintptr) *atomic.Pointer[connState] {
	return &t.recent[(uint64(key)*0x9E3779B97F4A7C15)>>(64-recentBits)]
}

// entry returns the dense entry of the connection whose netFD is fd and
// the entry's word (fd's address, with quietBit when it is quiet); nil and
// 0 when fd has none in this table.
func (t *connTable) entry(fd unsafe.Pointer) (*denseEntry, uintptr) {
	if t.tag == 0 {
		return nil, 0
	}
	ent := t.dense.at(t.index(fd))
	if ent == nil {
		return nil, 0
	}
	// An entry holds fd's address only while it holds fd's state: the
	// index in a netFD may be stale (an earlier engine's, or freed on
	// Close), and its entry then holds another address or none.
	if w := ent.word.Load(); w&^quietBit == uintptr(fd) {
		return ent, w
	}
	return nil, 0
}

// index is the dense index kept in fd (0 for none), and setIndex keeps
// one. Only with tag set.
func (t *connTable) index(fd unsafe.Pointer) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Add(fd, t.tag)))
}

func (t *connTable) setIndex(fd unsafe.Pointer, i uint32) {
	atomic.StoreUint32((*uint32)(unsafe.Add(fd, t.tag)), i)
}

// get returns the state of fd's connection, or nil. ent is fd's dense
// entry, as entry found it.
func (t *connTable) get(fd unsafe.Pointer, ent *denseEntry) *connState {
	key := uintptr(fd)
	if ent != nil {
		// the entry may have been freed and given to another connection
		// since its word was read
		if st := ent.st.Load(); st != nil && st.key == key && !st.gone.Load() {
			return st
		}
		return nil
	}
	slot := t.slot(key)
	// A state found in a slot is the key's while it is not gone: its netFD
	// has not been closed or collected, so no other netFD has its address.
	if st := slot.Load(); st != nil && st.key == key && !st.gone.Load() {
		return st
	}
	st, _ := t.m.Get(key)
	if st != nil && st.idx == 0 {
		slot.Store(st)
	}
	return st
}

// put adds st, whose netFD is fd, giving it a dense entry when it can.
// Called with create held.
func (t *connTable) put(st *connState, fd unsafe.Pointer) {
	if t.tag != 0 {
		// (st.idx set before the map publishes st: remove reads it)
		if st.idx = t.dense.alloc(); st.idx != 0 {
			ent := t.dense.at(st.idx)
			ent.st.Store(st)
			ent.word.Store(st.key)
			t.setIndex(fd, st.idx)
		}
	}
	t.m.Update(st.key, func(m map[uintptr]*connState) { m[st.key] = st })
	t.count.Add(1)
}

// remove deletes the entry for key if its generation is gen (or whatever
// it is when anyGen) and returns what it deleted.
func (t *connTable) remove(key uintptr, gen uint64, anyGen bool) *connState {
	st, ok := t.m.Delete(key, func(st *connState) bool { return !anyGen && st.gen != gen })
	if !ok {
		return nil
	}
	t.count.Add(-1)
	// gone before the slot is cleared: a lookup racing with this may put
	// st back, and finds it gone
	st.gone.Store(true)
	t.slot(key).CompareAndSwap(st, nil)
	if st.idx != 0 {
		t.create.Lock()
		t.dropEntry(st)
		t.create.Unlock()
	}
	return st
}

// dropEntry empties st's dense entry and frees its index. Under create.
func (t *connTable) dropEntry(st *connState) {
	ent := t.dense.at(st.idx)
	ent.word.Store(0)
	ent.st.Store(nil)
	t.dense.release(st.idx)
}

// markQuiet marks st's connection quiet: an outbound connection that
// carries no HTTP, is not redirected, and whose untraced writes are past
// set-up (see setupWrite). Record mode reports none of its untraced Reads
// and Writes, so the hooks settle those from the dense entry alone.
func (t *connTable) markQuiet(st *connState) {
	if st.idx != 0 {
		t.dense.at(st.idx).word.CompareAndSwap(st.key, st.key|quietBit)
	}
}

// drain removes every entry.
func (t *connTable) drain() []*connState {
	all := t.m.Drain()
	for _, st := range all {
		st.gone.Store(true)
	}
	for i := range t.recent {
		t.recent[i].Store(nil)
	}
	t.create.Lock()
	for _, st := range all {
		if st.idx != 0 {
			t.dropEntry(st)
		}
	}
	t.create.Unlock()
	t.count.Add(-int64(len(all)))
	return all
}

// quietBit marks a quiet connection in its dense entry's word (netFD
// addresses are word-aligned).
const quietBit = 1

// denseEntry is a connection's entry in connTable.dense.
type denseEntry struct {
	word atomic.Uintptr // the netFD's address | quietBit when quiet; 0 when free
	st   atomic.Pointer[connState]
}

// denseTable hands out small indexes, from 1, released ones first, and
// holds an entry for each, in chunks that never move.
type denseTable struct {
	chunks [denseChunks]atomic.Pointer[[denseChunk]denseEntry]
	free   []uint32 // released indexes (under connTable.create)
	next   uint32   // the lowest index never handed out, less one
}

const (
	denseChunk  = 512
	denseChunks = 2048 // up to about a million connections at once
)

// at returns the entry of index i, or nil for 0 and indexes never handed
// out.
func (d *denseTable) at(i uint32) *denseEntry {
	i-- // 0 wraps around and fails the bound
	if i >= denseChunk*denseChunks {
		return nil
	}
	c := d.chunks[i/denseChunk].Load()
	if c == nil {
		return nil
	}
	return &c[i%denseChunk]
}

// alloc returns a free index, 0 when all are taken. Under connTable.create.
func (d *denseTable) alloc() uint32 {
	if n := len(d.free); n > 0 {
		i := d.free[n-1]
		d.free = d.free[:n-1]
		return i
	}
	if d.next >= denseChunk*denseChunks {
		return 0
	}
	if d.next%denseChunk == 0 {
		d.chunks[d.next/denseChunk].Store(new([denseChunk]denseEntry))
	}
	d.next++
	return d.next
}

// release frees index i. Under connTable.create.
func (d *denseTable) release(i uint32) { d.free = append(d.free, i) }

// pendingConnects remembers, per socket descriptor, the original
// destination of a connect that replay mode redirected, until the
// connection's first Read or Write claims it. Every connect call sets or
// clears its descriptor's entry, so a stale entry (a failed dial whose
// socket net closed directly) is overwritten before an outbound connection
// can claim it; accepted connections never look.
type pendingConnects struct {
	mu sync.Mutex
	m  map[int]string
}

func (p *pendingConnects) set(fd int, dst string) {
	p.mu.Lock()
	if dst == "" {
		delete(p.m, fd)
	} else {
		p.m[fd] = dst
	}
	p.mu.Unlock()
}

// has reports whether fd's connect was redirected to the mock and its
// connection not set up yet.
func (p *pendingConnects) has(fd int) bool {
	p.mu.Lock()
	_, ok := p.m[fd]
	p.mu.Unlock()
	return ok
}

func (p *pendingConnects) take(fd int) (string, bool) {
	p.mu.Lock()
	dst, ok := p.m[fd]
	delete(p.m, fd)
	p.mu.Unlock()
	return dst, ok
}

type cleanupKey struct {
	key uintptr
	gen uint64
}

// state returns the state of the connection whose netFD is fd, creating it
// on first sight; nil for sockets the agent leaves alone. ent is fd's dense
// entry, as connTable.entry found it.
func (e *engine) state(fd unsafe.Pointer, ent *denseEntry) (st *connState) {
	if st = e.conns.get(fd, ent); st != nil {
		return st
	}
	defer func() {
		if r := recover(); r != nil {
			e.recovered("conn-state", r)
			st = nil
		}
	}()
	return e.newState(fd)
}

func (e *engine) newState(fd unsafe.Pointer) *connState {
	l := e.l
	if !l.fdStream(fd) {
		return nil
	}
	network := l.fdNet(fd)
	tcp := network == "tcp" || network == "tcp4" || network == "tcp6"
	if !tcp && network != "unix" {
		return nil
	}
	e.conns.create.Lock()
	defer e.conns.create.Unlock()
	if st := e.conns.get(fd, nil); st != nil { // (the map has every state)
		return st
	}
	st := &connState{key: uintptr(fd), inbound: !l.fdConnected(fd)}
	st.gen = e.nextID.Add(1)
	st.info.ID, st.info.Inbound = st.gen, st.inbound
	if la := l.fdLaddr(fd); la != nil {
		st.info.Local = la.String()
	}
	if ra := l.fdRaddr(fd); ra != nil {
		st.info.Remote = ra.String()
	}
	if !st.inbound && tcp && e.cfg.Mode == Replay {
		if sysfd, open := l.fdSysfd(fd); open {
			if dst, ok := e.connects.take(sysfd); ok {
				st.redirect, st.dst = true, dst
				st.info.Remote = dst
				if ap, err := netip.ParseAddrPort(dst); err != nil {
					st.info.Host = dst
				} else if ra, ok := l.fdRaddr(fd).(*net.TCPAddr); ok && ra.AddrPort() != ap {
					// the application sees the address it dialled, not
					// the mock server's: a client that dials its
					// connection's RemoteAddr again (pgx's CancelRequest)
					// is redirected too
					l.setFdRaddr(fd, net.TCPAddrFromAddrPort(ap))
				}
			}
		}
	}
	if !st.inbound && tcp && e.cfg.Mode == Record {
		st.info.Host = e.names.dialled(st.info.Remote)
	}
	if st.inbound {
		st.rd = newStream(false, e.cfg.noPath, func(h trace.RequestHead) string { return e.startRequest(st, &h) })
	} else {
		// a written request's head only names its in-band trace
		st.wr = newStream(true, true, inBandTrace)
	}
	e.conns.put(st, fd)
	counters.conns.Add(1)
	runtime.AddCleanup((*byte)(fd), e.collected, cleanupKey{st.key, st.gen})
	return st
}

// collected forgets a connection whose netFD was garbage collected without
// net.(*conn).Close (net's finalizer closed the socket).
func (e *engine) collected(k cleanupKey) {
	if st := e.conns.remove(k.key, k.gen, false); st != nil {
		e.forget(st)
	}
}

// forget releases what a connection holds: its binding, and tells the
// recorder.
func (e *engine) forget(st *connState) {
	defer func() {
		if r := recover(); r != nil {
			e.recovered("close", r)
		}
	}()
	st.unbind()
	st.h2.Load().closed()
	if e.cfg.Mode == Record {
		e.cfg.Recorder.Closed(&st.info)
	}
	if t := st.tlsSt.Swap(nil); t != nil {
		e.forget(t)
	}
}

// shutdown forgets every connection (Install's undo).
func (e *engine) shutdown() {
	for _, st := range e.conns.drain() {
		e.forget(st)
	}
	e.tlsOther.Range(func(k, v any) bool {
		e.tlsOther.Delete(k)
		e.forget(v.(*connState))
		return true
	})
	e.div.close()
	e.tlsFacts.close()
}

package wire

import "fmt"

// DetectBound is how many bytes of each side a Detector looks at: a
// connection whose protocol no registered protocol is sure of by then is
// raw. It is large enough for an HTTP request line with a long target.
const DetectBound = 8 << 10

// Registry is a table of protocols, in the order detection asks them, and
// the protocol every undecided connection falls back to. It is read-only
// once made and safe for concurrent use.
type Registry struct {
	list   []Protocol
	byName map[string]Protocol
	raw    Protocol
}

// NewRegistry returns a registry of ps, asked in that order, with fallback
// as the protocol of connections none of them is sure of (wire/raw). It
// panics on two protocols of one name or a nil one: a registry is built
// from a fixed table at start-up, and such a table is a programming error.
func NewRegistry(fallback Protocol, ps ...Protocol) *Registry {
	r := &Registry{byName: map[string]Protocol{}, raw: fallback}
	for _, p := range append([]Protocol{fallback}, ps...) {
		if p == nil {
			panic("wire: nil protocol in registry")
		}
		if _, dup := r.byName[p.Name()]; dup {
			panic(fmt.Sprintf("wire: protocol %q registered twice", p.Name()))
		}
		r.byName[p.Name()] = p
	}
	r.list = append([]Protocol(nil), ps...)
	return r
}

// Lookup returns the protocol of a name as recorded (recording.Call.Proto).
func (r *Registry) Lookup(name string) (Protocol, bool) {
	p, ok := r.byName[name]
	return p, ok
}

// For returns the protocol of a name, or the fallback for a name no
// protocol has (a recording made by a build that knew more protocols).
func (r *Registry) For(name string) Protocol {
	if p, ok := r.byName[name]; ok {
		return p
	}
	return r.raw
}

// Fallback returns the protocol of connections no other is sure of.
func (r *Registry) Fallback() Protocol { return r.raw }

// Protocols returns the detected protocols in detection order (the
// fallback not included). The slice is the caller's.
func (r *Registry) Protocols() []Protocol { return append([]Protocol(nil), r.list...) }

// Ported is implemented by a protocol whose server speaks first (MySQL):
// with no client bytes to detect it from, its well-known port is what the
// mock server goes by for a destination no recording names.
type Ported interface {
	Protocol
	// Port is the protocol's well-known port ("3306").
	Port() string
}

// ForPort returns the server-first protocol of a well-known port.
func (r *Registry) ForPort(port string) (Protocol, bool) {
	for _, p := range r.list {
		if pp, ok := p.(Ported); ok && pp.Port() == port {
			return p, true
		}
	}
	return nil, false
}

// Detect runs every protocol over the first bytes of each side. It returns
// the first protocol that is sure, the fallback when none can be any more
// (every one said No, or either side sent DetectBound bytes or more), and
// decided == false while some protocol still says NotYet.
func (r *Registry) Detect(client, server []byte) (p Protocol, decided bool) {
	if len(client) > DetectBound {
		client = client[:DetectBound]
	}
	if len(server) > DetectBound {
		server = server[:DetectBound]
	}
	waiting := false
	for _, p := range r.list {
		switch p.Detect(client, server) {
		case Sure:
			return p, true
		case NotYet:
			waiting = true
		}
	}
	if waiting && len(client) < DetectBound && len(server) < DetectBound {
		return nil, false
	}
	return r.raw, true
}

// DetectNow is Detect for a caller that cannot wait for more bytes (the
// mock server choosing how to answer a destination no recording names):
// undecided is the fallback.
func (r *Registry) DetectNow(client, server []byte) Protocol {
	if p, ok := r.Detect(client, server); ok {
		return p
	}
	return r.raw
}

// Detector follows the first bytes of one connection until its protocol
// is decided. The zero value is not usable: make one with
// Registry.NewDetector. It is not safe for concurrent use.
type Detector struct {
	reg            *Registry
	client, server []byte
	done           Protocol
}

// NewDetector returns a detector for one connection.
func (r *Registry) NewDetector() *Detector { return &Detector{reg: r} }

// Feed adds bytes side sent and returns the connection's protocol once it
// is decided (then every later Feed returns it at once). The detector
// keeps at most DetectBound bytes of each side, and none when the
// connection's first bytes decide.
func (d *Detector) Feed(side Side, p []byte) (Protocol, bool) {
	if d.done != nil {
		return d.done, true
	}
	first := len(d.client) == 0 && len(d.server) == 0
	if first {
		// most connections are decided by their first bytes: not copied
		c, s := p, []byte(nil)
		if side == Server {
			c, s = nil, p
		}
		if proto, ok := d.reg.Detect(c, s); ok {
			d.done = proto
			return proto, true
		}
	}
	buf := &d.client
	if side == Server {
		buf = &d.server
	}
	*buf = append(*buf, p[:min(len(p), DetectBound-len(*buf))]...)
	if !first {
		if proto, ok := d.reg.Detect(d.client, d.server); ok {
			d.done, d.server = proto, nil
			return proto, true
		}
	}
	return nil, false
}

// Client returns the client bytes the detector kept while undecided (nil
// when the first bytes decided): capture passes them to the Tap it makes
// on the decision, as the start of the call in progress.
func (d *Detector) Client() []byte { return d.client }

package hook

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Logical destinations (DESIGN.md 10). net resolves every name it dials in
// (*net.Resolver).internetAddrList, on the dialling goroutine, before any
// connect. The agent patches it:
//
//   - Record mode remembers which name each resolved address came from, so
//     that a dialled connection's ConnInfo.Host names the destination as
//     the service dialled it ("orders-db.prod:3306"), beside its address.
//   - Replay mode decides a named destination's route before DNS: a name
//     that goes to the mock server is not resolved at all (it need not
//     exist where the replay runs). The dial gets a placeholder address
//     from 198.18.0.0/15 (reserved for benchmarking networks, RFC 2544),
//     one per name; the connect hook sends a connect to it to the mock and
//     names "name:port" in the connection's frames. A rewritten name
//     resolves to its rule's target.
//
// Names the rules leave alone are resolved by the same steps as
// internetAddrList's own (split, port lookup, the resolver's lookupIPAddr
// with its de-duplication and httptrace events, family filter), through
// lookupIPAddr, which is called and never patched.

// addrListFunc is (*net.Resolver).internetAddrList's signature, its
// unexported addrList result as the []net.Addr it is.
type addrListFunc = func(r *net.Resolver, ctx context.Context, network, addr string) ([]net.Addr, error)

// lookupIPAddrFunc is (*net.Resolver).lookupIPAddr.
type lookupIPAddrFunc = func(r *net.Resolver, ctx context.Context, network, host string) ([]net.IPAddr, error)

var lookupIPAddr atomic.Pointer[lookupIPAddrFunc]

// resolveTarget finds internetAddrList to patch and lookupIPAddr to call.
func resolveTarget() (target, error) {
	rt := reflect.TypeFor[*net.Resolver]()
	word := methodWord(rt, "internetAddrList")
	if word == nil {
		return target{}, fmt.Errorf("%w: (*net.Resolver).internetAddrList not found in its type's methods", ErrUnsupported)
	}
	lw := methodWord(rt, "lookupIPAddr")
	if lw == nil {
		return target{}, fmt.Errorf("%w: (*net.Resolver).lookupIPAddr not found in its type's methods", ErrUnsupported)
	}
	inner := target{name: "net.(*Resolver).lookupIPAddr", word: lw}
	if err := checkName(inner); err != nil {
		return target{}, err
	}
	fn := funcOf[lookupIPAddrFunc](lw)
	lookupIPAddr.Store(&fn)
	return target{name: "net.(*Resolver).internetAddrList", word: word,
		typ: reflect.TypeFor[addrListFunc](), double: internetAddrList}, nil
}

// internetAddrList replaces (*net.Resolver).internetAddrList.
func internetAddrList(r *net.Resolver, ctx context.Context, network, addr string) ([]net.Addr, error) {
	e := active.Load()
	if e == nil || (network != "tcp" && network != "tcp4" && network != "tcp6") {
		return resolveAsNet(r, ctx, network, addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return resolveAsNet(r, ctx, network, addr)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return resolveAsNet(r, ctx, network, addr)
	}
	pn, err := r.LookupPort(ctx, network, port)
	if err != nil || pn <= 0 || pn > 0xFFFF {
		return resolveAsNet(r, ctx, network, addr)
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if e.cfg.Mode == Replay {
		if out, ok := e.routeDial(network, name, uint16(pn)); ok {
			return out, nil
		}
	}
	out, err := resolveAsNet(r, ctx, network, addr)
	if err == nil && e.cfg.Mode == Record {
		e.names.remember(out, name+":"+strconv.Itoa(pn))
	}
	return out, err
}

// routeDial returns the addresses a named dial gets in replay mode, or
// false when it is resolved as usual.
func (e *engine) routeDial(network, name string, port uint16) (out []net.Addr, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			e.recovered("resolve", r)
			out, ok = nil, false
		}
	}()
	rt, rule := e.cfg.routeName(name, port)
	switch rt {
	case routeRewrite:
		to := rule.target(port)
		for _, a := range rule.addrs {
			if network == "tcp4" && !a.Is4() || network == "tcp6" && a.Is4() {
				continue
			}
			out = append(out, &net.TCPAddr{IP: net.IP(a.AsSlice()).To16(), Port: int(to.Port())})
		}
		if len(out) > 0 {
			counters.rewritten.Add(1)
			e.debugOnce("rewrite:"+name, "rewriting connections", "dst", name, "to", to.String())
		}
		return out, len(out) > 0
	case routeMock:
		if network == "tcp6" {
			return nil, false // placeholders are IPv4
		}
		a, ok := e.names.placeholder(name)
		if !ok {
			return nil, false
		}
		e.debugOnce("name:"+name, "dialling a name through the mock server, unresolved", "name", name)
		return []net.Addr{&net.TCPAddr{IP: net.IP(a.AsSlice()).To16(), Port: int(port)}}, true
	}
	return nil, false
}

// resolveAsNet is internetAddrList's own work, for the networks and
// addresses the agent leaves alone.
func resolveAsNet(r *net.Resolver, ctx context.Context, network, addr string) ([]net.Addr, error) {
	var (
		host    string
		portnum int
	)
	switch network {
	case "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6":
		if addr != "" {
			h, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			if portnum, err = r.LookupPort(ctx, network, port); err != nil {
				return nil, err
			}
			host = h
		}
	case "ip", "ip4", "ip6":
		host = addr
	default:
		return nil, net.UnknownNetworkError(network)
	}
	inetaddr := func(ip net.IPAddr) net.Addr {
		switch network[0] {
		case 't':
			return &net.TCPAddr{IP: ip.IP, Port: portnum, Zone: ip.Zone}
		case 'u':
			return &net.UDPAddr{IP: ip.IP, Port: portnum, Zone: ip.Zone}
		}
		return &net.IPAddr{IP: ip.IP, Zone: ip.Zone}
	}
	if host == "" {
		return []net.Addr{inetaddr(net.IPAddr{})}, nil
	}
	ips, err := (*lookupIPAddr.Load())(r, ctx, network, host)
	if err != nil {
		return nil, err
	}
	// as net does (go.dev/issue/18806): "::" alone also tries 0.0.0.0
	if len(ips) == 1 && ips[0].IP.Equal(net.IPv6unspecified) {
		ips = append(ips, net.IPAddr{IP: net.IPv4zero})
	}
	last := network[len(network)-1]
	var out []net.Addr
	for _, ip := range ips {
		v4 := ip.IP.To4() != nil
		if last == '4' && !v4 || last == '6' && (v4 || len(ip.IP) != net.IPv6len) {
			continue
		}
		out = append(out, inetaddr(ip))
	}
	if len(out) == 0 {
		return nil, &net.AddrError{Err: "no suitable address found", Addr: host}
	}
	return out, nil
}

// nameTable holds, in replay mode, the placeholder address of each name
// dialled through the mock, and in record mode the name each recently
// resolved address came from.
type nameTable struct {
	mu    sync.Mutex
	ph    map[string]netip.Addr // replay: name → placeholder
	phRev map[netip.Addr]string // replay: placeholder → name
	next  uint32
	seen  map[netip.AddrPort]string // record: resolved address → "name:port"
}

// placeholderBase is 198.18.0.0/15's first address; placeholders are
// handed out from .0.1 on.
const placeholderBase = 198<<24 | 18<<16

const maxPlaceholders = 1<<17 - 2

// isPlaceholder reports whether a lies in 198.18.0.0/15.
func isPlaceholder(a netip.Addr) bool {
	if !a.Is4() {
		return false
	}
	b := a.As4()
	return b[0] == 198 && b[1]&0xFE == 18
}

// placeholder returns name's placeholder address, handing out a new one on
// first use; false once the range is used up.
func (t *nameTable) placeholder(name string) (netip.Addr, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a, ok := t.ph[name]; ok {
		return a, true
	}
	if t.next >= maxPlaceholders {
		return netip.Addr{}, false
	}
	if t.ph == nil {
		t.ph, t.phRev = map[string]netip.Addr{}, map[netip.Addr]string{}
	}
	t.next++
	n := uint32(placeholderBase) + t.next
	a := netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
	t.ph[name], t.phRev[a] = a, name
	return a, true
}

// nameOf returns the name whose placeholder a is.
func (t *nameTable) nameOf(a netip.Addr) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.phRev[a]
	return n, ok
}

// maxRemembered bounds record mode's table of resolved addresses; past it
// the table starts again (connections dialled since are still named).
const maxRemembered = 4096

// remember notes, in record mode, that addrs came from resolving hostPort.
func (t *nameTable) remember(addrs []net.Addr, hostPort string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen == nil || len(t.seen)+len(addrs) > maxRemembered {
		t.seen = make(map[netip.AddrPort]string, 64)
	}
	for _, a := range addrs {
		if ta, ok := a.(*net.TCPAddr); ok {
			ap := ta.AddrPort() // (v4-mapped when net holds the IPv4 address in 16 bytes)
			t.seen[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())] = hostPort
		}
	}
}

// dialled returns the "name:port" that remote ("ip:port") was resolved
// from, "" when none is known.
func (t *nameTable) dialled(remote string) string {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return ""
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.seen[ap]
}

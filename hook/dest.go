package hook

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// destSet is a set of destinations as RETRACE_PASSTHROUGH and
// RETRACE_BAFFLE name them: "host:port" (an address, or a host name and
// port), a bare host name or address (any port), or a CIDR range (any
// port). A host name matches a connection the service dialled by that name
// (see resolve.go); in a pass-through list, also connections to the
// addresses it resolves to at Install, when it resolves.
type destSet struct {
	addrs    map[netip.AddrPort]bool
	ips      map[netip.Addr]bool
	prefixes []netip.Prefix
	names    map[string]bool // lower-case "name:port", or "name" for any port
	resolve  bool            // names' addresses are in addrs too
}

func (s *destSet) empty() bool {
	return s == nil || len(s.addrs)+len(s.ips)+len(s.prefixes)+len(s.names) == 0
}

// hasAddr reports whether ap is in the set.
func (s *destSet) hasAddr(ap netip.AddrPort) bool {
	if s == nil {
		return false
	}
	if s.addrs[ap] || s.ips[ap.Addr()] {
		return true
	}
	for _, p := range s.prefixes {
		if p.Contains(ap.Addr()) {
			return true
		}
	}
	return false
}

// hasName reports whether the destination name:port (name lower-case) is
// in the set.
func (s *destSet) hasName(name string, port uint16) bool {
	if s == nil || len(s.names) == 0 {
		return false
	}
	return s.names[name] || s.names[name+":"+strconv.Itoa(int(port))]
}

// parseDestSet parses the items of a destination list; what names the
// list (a variable or field) comes first in errors.
func parseDestSet(what string, items []string, resolve bool) (*destSet, error) {
	s := &destSet{addrs: map[netip.AddrPort]bool{}, ips: map[netip.Addr]bool{}, names: map[string]bool{}, resolve: resolve}
	for _, it := range items {
		if it = strings.TrimSpace(it); it == "" {
			continue
		}
		if err := s.add(it); err != nil {
			return nil, fmt.Errorf("retrace: %s: %w", what, err)
		}
	}
	return s, nil
}

func (s *destSet) add(it string) error {
	if strings.Contains(it, "/") {
		p, err := netip.ParsePrefix(it)
		if err != nil {
			return fmt.Errorf("%q is not a CIDR range: %v", it, err)
		}
		s.prefixes = append(s.prefixes, p.Masked())
		return nil
	}
	if ip, err := netip.ParseAddr(strings.Trim(it, "[]")); err == nil {
		s.ips[ip.Unmap().WithZone("")] = true
		return nil
	}
	host, port, err := net.SplitHostPort(it)
	if err != nil {
		if !validHostName(it) {
			return fmt.Errorf("%q is neither host:port, a host name, an address nor a CIDR range", it)
		}
		s.names[strings.ToLower(it)] = true
		return nil
	}
	pn, err := parsePort(port)
	if err != nil {
		return fmt.Errorf("%q: %w", it, err)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		s.addrs[netip.AddrPortFrom(ip.Unmap().WithZone(""), pn)] = true
		return nil
	}
	if !validHostName(host) {
		return fmt.Errorf("%q: %q is not a host name", it, host)
	}
	s.names[strings.ToLower(host)+":"+strconv.Itoa(int(pn))] = true
	// A pass-through name that resolves here also matches connections to
	// its addresses (a client that resolves by itself), as before names
	// were matched by name. Baffled and rewritten names are production
	// names that need not resolve where the replay runs: asking DNS for
	// them at start could take its timeout.
	if !s.resolve {
		return nil
	}
	if aps, err := resolveAddr(it); err == nil {
		for _, ap := range aps {
			s.addrs[ap] = true
		}
	}
	return nil
}

// parsePort parses a numeric port or a service name.
func parsePort(port string) (uint16, error) {
	pn, err := net.LookupPort("tcp", port)
	if err != nil || pn <= 0 || pn > 0xFFFF {
		return 0, fmt.Errorf("bad port %q", port)
	}
	return uint16(pn), nil
}

// validHostName accepts DNS-style names: letters, digits, '-', '_' and
// dots, 1–253 characters.
func validHostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// rewriteRule is one RETRACE_REWRITE item: connections to a destination
// of from go to addrs (to resolved at Install; port 0 in to keeps the
// dialled port).
type rewriteRule struct {
	from  *destSet
	to    string
	host  string // to's host
	port  uint16 // 0: the dialled port
	addrs []netip.Addr
}

// target returns where a connection to port goes.
func (r *rewriteRule) target(port uint16) netip.AddrPort {
	if r.port != 0 {
		port = r.port
	}
	return netip.AddrPortFrom(r.addrs[0], port)
}

// parseRewrites parses from=to pairs (from: any destSet item; to:
// host:port, or a host that keeps the dialled port).
func parseRewrites(m map[string]string) ([]*rewriteRule, error) {
	var out []*rewriteRule
	// rules are tried in the order of their sources, so that overlapping
	// ones (an address and a range holding it) always resolve alike
	for _, from := range slices.Sorted(maps.Keys(m)) {
		to := strings.TrimSpace(m[from])
		from = strings.TrimSpace(from)
		set, err := parseDestSet("rewrite", []string{from}, false)
		if err != nil {
			return nil, err
		}
		if set.empty() {
			return nil, fmt.Errorf("retrace: rewrite: empty source in %q=%q", from, to)
		}
		r := &rewriteRule{from: set, to: to, host: to}
		if h, p, err := net.SplitHostPort(to); err == nil {
			if r.port, err = parsePort(p); err != nil {
				return nil, fmt.Errorf("retrace: rewrite %s=%s: %w", from, to, err)
			}
			r.host = h
		}
		if ip, err := netip.ParseAddr(strings.Trim(r.host, "[]")); err == nil {
			r.addrs = []netip.Addr{ip.Unmap().WithZone("")}
		} else {
			if !validHostName(r.host) {
				return nil, fmt.Errorf("retrace: rewrite %s=%s: %q is not host:port or a host", from, to, to)
			}
			ips, err := net.LookupIP(r.host)
			if err != nil || len(ips) == 0 {
				return nil, fmt.Errorf("retrace: rewrite %s=%s: cannot resolve %q: %v", from, to, r.host, err)
			}
			for _, ip := range ips {
				if a, ok := netip.AddrFromSlice(ip); ok {
					r.addrs = append(r.addrs, a.Unmap())
				}
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// route is where a replay-mode connection goes.
type route int

const (
	routeDirect  route = iota // where the service dialled it
	routeMock                 // to the mock server, framed
	routeRewrite              // to a rewrite rule's target
)

// routeAddr decides where a connect to ap goes, and for a rewrite its
// rule. The order: the mock itself and rewrite targets go where they are
// dialled; then RETRACE_REWRITE, RETRACE_PASSTHROUGH, and RETRACE_BAFFLE
// (when set, only its destinations go to the mock).
func (c *resolvedConfig) routeAddr(ap netip.AddrPort) (route, *rewriteRule) {
	if ap == c.mock || c.rewriteTo[ap] || c.rewriteIP[ap.Addr()] {
		return routeDirect, nil
	}
	for _, r := range c.rewrites {
		if r.from.hasAddr(ap) {
			return routeRewrite, r
		}
	}
	if c.pass.hasAddr(ap) {
		return routeDirect, nil
	}
	if c.baffled != nil && !c.baffled.hasAddr(ap) {
		return routeDirect, nil
	}
	return routeMock, nil
}

// routeName decides where a dial of name:port (name lower-case) goes
// before it is resolved. routeDirect means: resolve it as usual (the
// connect that follows is routed by its address).
func (c *resolvedConfig) routeName(name string, port uint16) (route, *rewriteRule) {
	if c.mockName == name && c.mock.Port() == port {
		return routeDirect, nil
	}
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		// a loopback name means this machine wherever the replay runs:
		// routed by its address, as RETRACE_PASSTHROUGH lists it
		// ("127.0.0.1:8080") before names were followed
		return routeDirect, nil
	}
	for _, r := range c.rewrites {
		if r.from.hasName(name, port) {
			return routeRewrite, r
		}
	}
	if c.pass.hasName(name, port) {
		return routeDirect, nil
	}
	if c.baffled != nil && !c.baffled.hasName(name, port) {
		return routeDirect, nil
	}
	return routeMock, nil
}

// CheckDestination reports whether s is a destination as Passthrough,
// Baffle and the keys of Rewrite take them ("host:port", a host name or
// address, a CIDR range), with an error saying what is wrong. It resolves
// nothing.
func CheckDestination(s string) error {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		if _, err := netip.ParsePrefix(s); err != nil {
			return fmt.Errorf("%q is not a CIDR range: %v", s, err)
		}
		return nil
	}
	if _, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		if !validHostName(s) {
			return fmt.Errorf("%q is neither host:port, a host name, an address nor a CIDR range", s)
		}
		return nil
	}
	if _, err := parsePort(port); err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	if _, err := netip.ParseAddr(host); err != nil && !validHostName(host) {
		return fmt.Errorf("%q: %q is not a host name", s, host)
	}
	return nil
}

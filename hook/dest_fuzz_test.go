package hook

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzDestinations: CheckDestination and the parser the agent uses agree on
// every input, never panic, and what parses matches itself: an address is
// in its own set, a name matches its own dial.
func FuzzDestinations(f *testing.F) {
	for _, s := range []string{"10.0.0.7:6379", "[::1]:3306", "db.prod.svc:3306", "pricing", "10.0.0.0/8",
		"::1", "a:http", "a:0", "a:70000", "x/y", "", "[fe80::1%eth0]:1", "Pricing.Prod.:8081"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.TrimSpace(s) == "" {
			return // an empty item of a list is skipped, not a destination
		}
		set, err := parseDestSet("fuzz", []string{s}, false)
		if (CheckDestination(s) == nil) != (err == nil) {
			t.Fatalf("%q: CheckDestination and the parser disagree (parser: %v, check: %v)", s, err, CheckDestination(s))
		}
		if err != nil {
			return
		}
		for ap := range set.addrs {
			if !set.hasAddr(ap) {
				t.Fatalf("%q: address %v not in its own set", s, ap)
			}
		}
		for ip := range set.ips {
			if !set.hasAddr(netip.AddrPortFrom(ip, 1)) {
				t.Fatalf("%q: %v not in its own set", s, ip)
			}
		}
	})
}

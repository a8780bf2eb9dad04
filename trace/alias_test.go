package trace

import (
	"strings"
	"testing"
)

func TestAlias(t *testing.T) {
	long := strings.Repeat("a", 60)
	cases := []struct {
		name, rec, suffix, want string
		ok                      bool
	}{
		{"plain", "6482f5e4d96abad699778a4a679a8068", "k3f9a1", "6482f5e4d96abad699778a4a679a8068._k3f9a1", true},
		{"dots in the recording", "prod.log.812", "x1", "prod.log.812._x1", true},
		{"too long", long, "abcd", "", false},
		{"bad suffix", "rec", "a_b", "", false},
		{"empty suffix", "rec", "", "", false},
		{"bad recording", "rec:1", "a", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := Alias(c.rec, c.suffix)
			if got != c.want || ok != c.ok {
				t.Fatalf("Alias(%q, %q) = %q, %v; want %q, %v", c.rec, c.suffix, got, ok, c.want, c.ok)
			}
			if !ok {
				return
			}
			if !ValidID(got) {
				t.Fatalf("%q is not a valid id", got)
			}
			if rec, ok := AliasOf(got); !ok || rec != c.rec {
				t.Fatalf("AliasOf(%q) = %q, %v", got, rec, ok)
			}
		})
	}
	for _, id := range []string{"rec", "._a", "rec._", "rec._a-b", "rec._a.b"} {
		if rec, ok := AliasOf(id); ok {
			t.Errorf("AliasOf(%q) = %q: not an alias", id, rec)
		}
	}
}

func FuzzAliasOf(f *testing.F) {
	for _, s := range []string{"rec._a1", "a._b._c", "._", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		rec, ok := AliasOf(id)
		if !ok {
			return
		}
		suffix := id[len(rec)+len(AliasSep):]
		if again, ok2 := Alias(rec, suffix); ValidID(id) && (!ok2 || again != id) {
			t.Fatalf("AliasOf(%q) = %q; Alias gives %q, %v", id, rec, again, ok2)
		}
	})
}

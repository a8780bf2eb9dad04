package trace

import "strings"

// AliasSep separates a recording's id from the suffix of a derived alias
// (DESIGN.md 3.2): the trace id "REC._SUFFIX" selects the recording REC
// with a trace state of its own, with no call to the mock server's admin
// API. A load test sends each replay of a recording under a fresh suffix.
const AliasSep = "._"

// Alias returns the derived alias rec._suffix, and false when it would not
// be a valid trace id (longer than MaxIDLen, or rec not a valid id) or
// suffix is empty or holds anything but letters and digits.
func Alias(rec, suffix string) (string, bool) {
	if !ValidID(rec) || suffix == "" || len(rec)+len(AliasSep)+len(suffix) > MaxIDLen {
		return "", false
	}
	for i := 0; i < len(suffix); i++ {
		c := suffix[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return "", false
		}
	}
	return rec + AliasSep + suffix, true
}

// AliasOf returns the recording id a derived alias names: what comes
// before its last AliasSep, when a suffix of letters and digits follows.
// False for any other id.
func AliasOf(id string) (rec string, ok bool) {
	i := strings.LastIndex(id, AliasSep)
	if i <= 0 || i+len(AliasSep) == len(id) {
		return "", false
	}
	for j := i + len(AliasSep); j < len(id); j++ {
		c := id[j]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return "", false
		}
	}
	return id[:i], true
}

package ratefields

// MaxQuotaUnit bounds the length of a quota unit's name, in bytes: 64.
const MaxQuotaUnit = 64

// ValidQuotaUnit reports whether unit can be sent as a qu parameter (as a
// quota unit's name, draft-ietf-httpapi-ratelimit-headers-11, section
// 3.1.2): 1 to MaxQuotaUnit lower-case ASCII letters, digits and hyphens,
// starting with a letter, as the registered units are.
func ValidQuotaUnit(unit string) bool {
	ok := unit != "" && len(unit) <= MaxQuotaUnit && unit[0] >= 'a' && unit[0] <= 'z'
	for i := 0; ok && i < len(unit); i++ {
		c := unit[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-'
	}
	return ok
}

package ratefields

import "net/netip"

// DefaultIPv6Prefix is how many leading bits of an IPv6 client address make
// its key when the configuration says 0: 64, one subnet.
const DefaultIPv6Prefix = 64

// IPv6Bits returns the bits of an IPv6 address that make a client's key
// for a configured prefix length: DefaultIPv6Prefix for 0, prefix itself
// for 1 to 128. It reports false for a prefix outside 0 to 128.
func IPv6Bits(prefix int) (int, bool) {
	switch {
	case prefix == 0:
		return DefaultIPv6Prefix, true
	case prefix < 0 || prefix > 128:
		return 0, false
	}
	return prefix, true
}

// The prefixes of IPv4 clients translated into IPv6, besides IPv4-mapped
// addresses (::ffff:0:0/96, a dual-stack socket's view of an IPv4 peer):
// the well-known prefix of NAT64 and of IPv4 clients translated into an
// IPv6 network (64:ff9b::/96, RFC 6052) and SIIT's IPv4-translated
// addresses (::ffff:0:0:0/96, RFC 2765).
var (
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	siitPrefix  = netip.MustParsePrefix("::ffff:0:0:0/96")
)

// IsIPv4In6 reports whether a, without its zone, is one of the IPv6 forms
// of an IPv4 address that are keyed as IPv4: IPv4-mapped, NAT64's or
// SIIT's, the IPv4 address in their last 32 bits.
func IsIPv4In6(a netip.Addr) bool {
	a = a.WithZone("")
	return a.Is4In6() || nat64Prefix.Contains(a) || siitPrefix.Contains(a)
}

// Normalize drops a's zone and turns an IPv6 form of an IPv4 address (see
// IsIPv4In6) into that IPv4 address, so that clients behind NAT64 or SIIT
// are keyed as the IPv4 addresses they are.
func Normalize(a netip.Addr) netip.Addr {
	a = a.WithZone("")
	if !IsIPv4In6(a) {
		return a
	}
	b := a.As16()
	return netip.AddrFrom4([4]byte(b[12:]))
}

// AddrKey returns the key of client address a, which Normalize has
// returned: its usual text form for IPv4, and for IPv6 its prefix of
// v6Bits bits ("2001:db8:1:2::/64"), or the plain address when v6Bits is
// 128 or more. v6Bits must be > 0 (see IPv6Bits).
func AddrKey(a netip.Addr, v6Bits int) string {
	if a.Is4() || v6Bits >= 128 {
		return a.String()
	}
	p, err := a.Prefix(v6Bits)
	if err != nil {
		return a.String() // cannot happen: a is IPv6 and 0 < v6Bits < 128
	}
	return p.String()
}

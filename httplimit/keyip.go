package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/ratefields"
)

// ProxyHeader names the header field that trusted proxies use to tell the
// address of the client they forward for. The zero value is XForwardedFor.
type ProxyHeader int

const (
	// XForwardedFor is the X-Forwarded-For field: a comma-separated list of
	// addresses, each proxy appending the one it received the request from.
	XForwardedFor ProxyHeader = iota
	// Forwarded is the RFC 7239 Forwarded field: a list of elements whose
	// for= parameters hold those addresses.
	Forwarded
)

// IPConfig configures KeyByIP. The zero value keys every request by its
// connection's address, trusting no proxy.
type IPConfig struct {
	// TrustedProxies are the proxies whose forwarding header is believed, as
	// CIDR prefixes ("10.0.0.0/8", "2001:db8::/32") or single addresses.
	// IPv6 forms of IPv4 addresses (IPv4-mapped, NAT64's 64:ff9b::/96,
	// SIIT's ::ffff:0:0:0/96) are taken as IPv4. A prefix wider than /8 of
	// IPv4, or than /16 of global IPv6 (2000::/3), is refused: any client
	// in it could choose its own key. Unique-local (fc00::/7) and other
	// IPv6 ranges that are not global may be trusted at any width.
	TrustedProxies []string
	// IPv6Prefix is how many leading bits of an IPv6 client address make
	// its key, so that one host's many addresses share a limit: 0 means 64
	// (one subnet), 128 keys each address alone. It must be 0 to 128.
	IPv6Prefix int
	// Header is the field the trusted proxies set: X-Forwarded-For (the
	// default) or Forwarded. Only that one is read: a proxy that sets one
	// field passes the other on as the client sent it, so reading both
	// would let clients choose their own address.
	Header ProxyHeader
}

// KeyByIP returns a KeyFunc that keys a request by its client's IP address.
//
// The client is the connection's peer (r.RemoteAddr) unless the peer is a
// trusted proxy. Then the forwarding header (cfg.Header) is read from the
// right, across all its field lines, skipping addresses of trusted proxies:
// the first address that is not one is the client. If every address is a
// trusted proxy, the leftmost is the client. An entry that is not an address
// (malformed, "unknown", an obfuscated identifier, a Forwarded element
// without for=) stops the walk, and the last trusted address before it is the
// client: the proxy that could not say who it forwarded for. Only the 64
// rightmost entries are considered. Ports, brackets, zones and quoting are
// accepted and dropped. A header from a peer that is not a trusted proxy is
// ignored.
//
// A Forwarded line is parsed by RFC 7239's grammar (elements of ';'-separated
// token=value pairs, a value a token or an RFC 9110 quoted string; optional
// whitespace around ';' and '=' and unquoted ports and IPv6 addresses are
// tolerated) and cut into elements from the right, so that what a client
// wrote to the left of a proxy's entry, an unmatched quote included, never
// changes that entry: a proxy that appends ", for=<client>" to the client's
// own line is read as it meant. A malformed element, one without for= and
// one with two are not addresses, and stop the walk as above.
//
// The key is the address in its usual text form for IPv4 (and for the IPv6
// forms of IPv4 addresses: IPv4-mapped, NAT64's 64:ff9b::/96 and SIIT's
// ::ffff:0:0:0/96, so that IPv4 clients translated into IPv6 keep keys of
// their own), and the masked prefix for IPv6, such as "2001:db8:1:2::/64",
// or the plain address with IPv6Prefix 128. A request whose RemoteAddr is
// not an IP address (a Unix socket, say) gets an error wrapping ErrNoKey.
//
// The KeyFunc is safe for concurrent use. KeyByIP returns an error wrapping
// ratelimit.ErrInvalidConfig that names the proxy for a trusted proxy that is
// not a prefix or address or is a prefix wider than it trusts (see
// IPConfig.TrustedProxies), and for an IPv6Prefix outside 0 to 128 or an
// unknown Header.
func KeyByIP(cfg IPConfig) (KeyFunc, error) {
	bits, ok := ratefields.IPv6Bits(cfg.IPv6Prefix)
	if !ok {
		return nil, fmt.Errorf("%w: httplimit: KeyByIP: IPv6Prefix %d must be 0 to 128", ratelimit.ErrInvalidConfig, cfg.IPv6Prefix)
	}
	if cfg.Header != XForwardedFor && cfg.Header != Forwarded {
		return nil, fmt.Errorf("%w: httplimit: KeyByIP: unknown proxy header %d", ratelimit.ErrInvalidConfig, int(cfg.Header))
	}
	trusted := make([]netip.Prefix, 0, len(cfg.TrustedProxies))
	for _, s := range cfg.TrustedProxies {
		p, err := parseTrusted(s)
		if err != nil {
			return nil, err
		}
		trusted = append(trusted, p)
	}
	k := &ipKeyer{trusted: trusted, v6Bits: bits, header: cfg.Header}
	return k.key, nil
}

// ipKeyer is KeyByIP's KeyFunc. It is immutable.
type ipKeyer struct {
	trusted []netip.Prefix
	v6Bits  int
	header  ProxyHeader
}

// key returns r's client address as a key.
func (k *ipKeyer) key(r *http.Request) (string, error) {
	peer, ok := parseRemoteAddr(r.RemoteAddr)
	if !ok {
		return "", fmt.Errorf("%w: RemoteAddr %q is not an IP address", ErrNoKey, r.RemoteAddr)
	}
	client := peer
	if k.isTrusted(peer) {
		client = k.walk(r.Header, peer)
	}
	return ratefields.AddrKey(client, k.v6Bits), nil
}

// isTrusted reports whether a is a trusted proxy's address.
func (k *ipKeyer) isTrusted(a netip.Addr) bool {
	for _, p := range k.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// walk returns the client address that the forwarding header of a request
// from the trusted proxy peer tells, as KeyByIP describes: its field lines
// are read from the last, each from the right, as far as the walk goes.
func (k *ipKeyer) walk(h http.Header, peer netip.Addr) netip.Addr {
	w := hopWalk{k: k, client: peer}
	read, lines := xForwardedFors, h["X-Forwarded-For"]
	if k.header == Forwarded {
		read, lines = forwardedFors, h["Forwarded"]
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if !read(lines[i], w.visit) {
			break
		}
	}
	return w.client
}

// hopWalk is one walk of a forwarding header from the right.
type hopWalk struct {
	k      *ipKeyer
	client netip.Addr // the client so far: the last trusted address, or the one found
	hops   int        // entries visited
}

// visit takes the next entry from the right and reports whether the walk
// goes on: past a trusted proxy's address, within maxHops entries. An
// address that is not a trusted proxy's is the client; an entry that is
// not an address leaves the client the last trusted address.
func (w *hopWalk) visit(entry string) bool {
	w.hops++
	a, ok := parseHop(entry)
	if !ok {
		return false
	}
	w.client = a
	return w.k.isTrusted(a) && w.hops < maxHops
}

// The widest prefixes KeyByIP trusts: no organisation's proxies need more
// than a /8 of IPv4 (the largest block ever assigned to one holder, and
// 10.0.0.0/8, the largest private range) or a /16 of global IPv6 (larger
// than any one network's allocation), while a wider trust puts large parts
// of the Internet, whose clients would each pick their own key, in it.
const (
	widestTrustedIPv4 = 8
	widestTrustedIPv6 = 16
)

// globalIPv6 is the IPv6 space assigned for global unicast, the only IPv6
// space whose width KeyByIP bounds: unique-local (fc00::/7), link-local and
// other ranges no Internet client sends from may be trusted whole.
var globalIPv6 = netip.MustParsePrefix("2000::/3")

// parseTrusted parses a trusted proxy, a prefix or a single address, into a
// masked prefix with IPv4-mapped and translated IPv6 forms turned into IPv4
// (see ratefields.Normalize), and refuses one wider than the widest KeyByIP
// trusts.
func parseTrusted(s string) (netip.Prefix, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: httplimit: KeyByIP: trusted proxy %q: %s", ratelimit.ErrInvalidConfig, s, why)
	}
	t := strings.TrimSpace(s)
	if strings.Contains(t, "/") {
		p, err := netip.ParsePrefix(t)
		if err != nil {
			return netip.Prefix{}, bad("not a CIDR prefix")
		}
		p, why := checkTrusted(p)
		if why != "" {
			return netip.Prefix{}, bad(why)
		}
		return p, nil
	}
	a, err := netip.ParseAddr(t)
	if err != nil {
		return netip.Prefix{}, bad("not an IP address or CIDR prefix")
	}
	if a.Zone() != "" {
		return netip.Prefix{}, bad("zones are not allowed")
	}
	a = ratefields.Normalize(a)
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// checkTrusted returns p masked, with IPv4-mapped and translated IPv6
// forms turned into IPv4, or why it is not trusted: not a valid prefix, a
// zone, or wider than the widest KeyByIP trusts.
func checkTrusted(p netip.Prefix) (netip.Prefix, string) {
	if !p.IsValid() {
		return p, "not a valid prefix"
	}
	if p.Addr().Zone() != "" {
		return p, "zones are not allowed"
	}
	if a := p.Addr(); p.Bits() >= 96 && ratefields.IsIPv4In6(a) {
		p = netip.PrefixFrom(ratefields.Normalize(a), p.Bits()-96)
	}
	p = p.Masked()
	switch {
	case p.Addr().Is4() && p.Bits() < widestTrustedIPv4:
		return p, fmt.Sprintf("an IPv4 prefix wider than /%d trusts large parts of the Internet, whose clients would each choose their own key; list your proxies' own ranges", widestTrustedIPv4)
	case p.Addr().Is6() && p.Bits() < widestTrustedIPv6 && p.Overlaps(globalIPv6):
		return p, fmt.Sprintf("a prefix of global IPv6 wider than /%d trusts large parts of the Internet, whose clients would each choose their own key; list your proxies' own ranges", widestTrustedIPv6)
	}
	return p, ""
}

// parseRemoteAddr parses a connection's address, "host:port" as net/http sets
// it, or a bare address, as ratefields.Normalize leaves it.
func parseRemoteAddr(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ratefields.Normalize(ap.Addr()), true
	}
	return parseHop(s)
}

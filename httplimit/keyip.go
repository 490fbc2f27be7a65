package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/ratelimit-go/ratelimit"
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
	// IPv4-mapped IPv6 forms are taken as IPv4.
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

// defaultIPv6Prefix is IPConfig.IPv6Prefix's meaning of 0.
const defaultIPv6Prefix = 64

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
// The key is the address in its usual text form for IPv4 (IPv4-mapped IPv6
// addresses included), and the masked prefix for IPv6, such as
// "2001:db8:1:2::/64", or the plain address with IPv6Prefix 128. A request
// whose RemoteAddr is not an IP address (a Unix socket, say) gets an error
// wrapping ErrNoKey.
//
// The KeyFunc is safe for concurrent use. KeyByIP returns an error wrapping
// ratelimit.ErrInvalidConfig for a trusted proxy that is not a prefix or
// address, an IPv6Prefix outside 0 to 128 or an unknown Header.
func KeyByIP(cfg IPConfig) (KeyFunc, error) {
	bits := cfg.IPv6Prefix
	switch {
	case bits == 0:
		bits = defaultIPv6Prefix
	case bits < 0 || bits > 128:
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
	return k.format(client), nil
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
// from the trusted proxy peer tells, as KeyByIP describes.
func (k *ipKeyer) walk(h http.Header, peer netip.Addr) netip.Addr {
	var hops hopRing
	if k.header == Forwarded {
		for _, v := range h["Forwarded"] {
			forwardedFors(v, &hops)
		}
	} else {
		for _, v := range h["X-Forwarded-For"] {
			xForwardedFors(v, &hops)
		}
	}
	last := peer
	for i := range hops.len() {
		a, ok := parseHop(hops.fromRight(i))
		if !ok {
			return last
		}
		if !k.isTrusted(a) {
			return a
		}
		last = a
	}
	return last
}

// format returns the key for client address a.
func (k *ipKeyer) format(a netip.Addr) string {
	if a.Is4() || k.v6Bits >= 128 {
		return a.String()
	}
	p, err := a.Prefix(k.v6Bits)
	if err != nil {
		return a.String() // cannot happen: a is IPv6 and 0 < v6Bits < 128
	}
	return p.String()
}

// parseTrusted parses a trusted proxy, a prefix or a single address, into a
// masked prefix with IPv4-mapped IPv6 forms turned into IPv4.
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
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(t)
	if err != nil {
		return netip.Prefix{}, bad("not an IP address or CIDR prefix")
	}
	if a.Zone() != "" {
		return netip.Prefix{}, bad("zones are not allowed")
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// parseRemoteAddr parses a connection's address, "host:port" as net/http sets
// it, or a bare address, dropping any zone and unmapping IPv4-mapped IPv6.
func parseRemoteAddr(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return normalize(ap.Addr()), true
	}
	return parseHop(s)
}

// normalize drops a's zone and turns an IPv4-mapped IPv6 address into IPv4.
func normalize(a netip.Addr) netip.Addr {
	return a.WithZone("").Unmap()
}

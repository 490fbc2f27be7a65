package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/ratefields"
)

// PerIP returns next behind l, each client IP address its own key: the
// everyday limit in one call. Allowed requests carry the rate-limit
// fields; denied ones are answered 429 Too Many Requests with Retry-After,
// the fields and a problem document, as NewMiddleware's Handler answers.
//
//	limiter, err := ratelimit.NewGCRA(10, time.Second)
//	...
//	h, err := httplimit.PerIP(limiter, mux,
//		httplimit.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8")))
//
// The client is the connection's peer unless WithTrustedProxies names it
// a proxy: then the X-Forwarded-For field, read from the right past the
// trusted proxies, says who it is, as KeyByIP describes; an IPv6 client's
// key is its /64. For the Forwarded field or another IPv6 width, use
// NewMiddleware with KeyByIP. opts are NewMiddleware's, and
// WithTrustedProxies.
//
// It returns an error wrapping ratelimit.ErrInvalidConfig for a nil next
// and for whatever NewMiddleware or WithTrustedProxies refuses.
func PerIP(l ratelimit.Limiter, next http.Handler, opts ...Option) (http.Handler, error) {
	if isNil(next) {
		return nil, fmt.Errorf("%w: httplimit: PerIP: nil next handler", ratelimit.ErrInvalidConfig)
	}
	m, err := newMiddleware(l, nil, true, opts)
	if err != nil {
		return nil, err
	}
	return m.Handler(next), nil
}

// perIPKey returns PerIP's KeyFunc: the client's address, read from
// X-Forwarded-For past the trusted proxies, IPv6 clients by their /64.
func perIPKey(trusted []netip.Prefix) KeyFunc {
	bits, _ := ratefields.IPv6Bits(0)
	k := &ipKeyer{trusted: trusted, v6Bits: bits, header: XForwardedFor}
	return k.key
}

// WithTrustedProxies names the proxies PerIP believes: prefixes such as
// netip.MustParsePrefix("10.0.0.0/8"), or one address as a prefix of its
// whole length (netip.PrefixFrom(addr, addr.BitLen())). They are taken as
// IPConfig.TrustedProxies are: IPv6 forms of IPv4 addresses as IPv4, and a
// prefix wider than /8 of IPv4, or than /16 of global IPv6, refused, since
// any client in it could choose its own key. An invalid prefix (the zero
// netip.Prefix) is an error too, and so is the option with NewMiddleware,
// whose KeyFunc (KeyByIP's IPConfig) names its proxies itself. Given
// several times, the prefixes add up.
func WithTrustedProxies(prefixes ...netip.Prefix) Option {
	return func(s *settings) error {
		for _, p := range prefixes {
			masked, why := checkTrusted(p)
			if why != "" {
				return fmt.Errorf("%w: httplimit: WithTrustedProxies: %v: %s", ratelimit.ErrInvalidConfig, p, why)
			}
			s.trusted = append(s.trusted, masked)
		}
		s.trustedSet = true
		return nil
	}
}

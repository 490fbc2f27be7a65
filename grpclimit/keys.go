package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/ratefields"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// KeyFunc returns the key a call is limited under: who is calling (a user
// id, an API key, a client address), so that each key has its own limit.
// fullMethod is the method's full name, "/package.Service/Method", for a
// key or a limit per method. It must be safe for concurrent use.
//
// An error answers the call without asking the limiter: with the error's
// own gRPC status when it carries one (status.FromError finds it, wrapped
// or not), and codes.Internal otherwise, as package httplimit answers 500.
type KeyFunc func(ctx context.Context, fullMethod string) (string, error)

// ErrNoKey is wrapped by the errors of the KeyFuncs in this package when a
// call does not carry what they key it by.
var ErrNoKey = errors.New("grpclimit: no rate-limit key in call")

// keyError is an error wrapping ErrNoKey that answers with a gRPC code.
type keyError struct {
	code codes.Code
	msg  string
}

func (e *keyError) Error() string { return e.msg }

func (e *keyError) Unwrap() []error { return []error{ErrNoKey, ErrMissingCredential} }

// GRPCStatus makes the interceptor (and any gRPC server) answer e with its
// code.
func (e *keyError) GRPCStatus() *status.Status { return status.New(e.code, e.msg) }

// KeyByMetadata returns a KeyFunc that keys a call by the first value of
// its incoming metadata key name ("x-api-key"), matched
// case-insensitively. A call without the key, or whose first value is
// empty, gets an error wrapping ErrNoKey and ErrMissingCredential that
// answers codes.Unauthenticated: keying by metadata is usually keying by a
// credential, and a call without it cannot be told apart from any other
// anonymous caller. To answer another code, wrap the KeyFunc and return
// status.Error(code, ...) for errors.Is(err, ErrNoKey).
//
// Only key by metadata the client cannot forge, or one whose value is a
// credential checked before the limit (an API key), since each new value
// is a fresh limit. The KeyFunc is safe for concurrent use.
func KeyByMetadata(name string) KeyFunc {
	key := strings.ToLower(name)
	missing := &keyError{code: codes.Unauthenticated, msg: fmt.Sprintf("grpclimit: metadata %q is missing or empty: %v", key, ErrNoKey)}
	return func(ctx context.Context, _ string) (string, error) {
		if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 && v[0] != "" {
			return v[0], nil
		}
		return "", missing
	}
}

// PeerConfig configures KeyByPeer. The zero value keys IPv6 clients by
// their /64.
type PeerConfig struct {
	// IPv6Prefix is how many leading bits of an IPv6 client address make
	// its key, so that one host's many addresses share a limit: 0 means 64
	// (one subnet), 128 keys each address alone. It must be 0 to 128.
	IPv6Prefix int
}

// KeyByPeer returns a KeyFunc that keys a call by the IP address of its
// connection's peer (peer.FromContext), without the port: the address in
// its usual text form for IPv4 (and for the IPv6 forms of IPv4 addresses:
// IPv4-mapped, NAT64's 64:ff9b::/96 and SIIT's ::ffff:0:0:0/96, so that
// IPv4 clients translated into IPv6 keep keys of their own), and the
// masked prefix for IPv6, such as "2001:db8:1:2::/64", or the plain
// address with IPv6Prefix 128, as httplimit.KeyByIP does.
//
// It believes no metadata: behind a proxy every call has the proxy's
// address, so key by what the proxy sets (KeyByMetadata on a key the proxy
// overwrites) or by the authenticated caller instead. A call whose peer is
// not an IP address (a Unix socket, an in-memory listener) gets an error
// wrapping ErrNoKey, answered codes.Internal: it is the server's set-up,
// not the client, that is wrong.
//
// The KeyFunc is safe for concurrent use. KeyByPeer returns an error
// wrapping ratelimit.ErrInvalidConfig for an IPv6Prefix outside 0 to 128.
func KeyByPeer(cfg PeerConfig) (KeyFunc, error) {
	bits, ok := ratefields.IPv6Bits(cfg.IPv6Prefix)
	if !ok {
		return nil, fmt.Errorf("%w: grpclimit: KeyByPeer: IPv6Prefix %d must be 0 to 128", ratelimit.ErrInvalidConfig, cfg.IPv6Prefix)
	}
	return func(ctx context.Context, _ string) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", fmt.Errorf("%w: the call has no peer", ErrNoKey)
		}
		a, ok := peerIP(p.Addr)
		if !ok {
			return "", fmt.Errorf("%w: peer %q is not an IP address", ErrNoKey, p.Addr.String())
		}
		return ratefields.AddrKey(a, bits), nil
	}, nil
}

// peerIP returns the IP address of addr, without zone, an IPv6 form of an
// IPv4 address (see KeyByPeer) turned into that IPv4 address.
func peerIP(addr net.Addr) (netip.Addr, bool) {
	var a netip.Addr
	switch v := addr.(type) {
	case *net.TCPAddr:
		ip, ok := netip.AddrFromSlice(v.IP)
		if !ok {
			return netip.Addr{}, false
		}
		a = ip
	default:
		ap, err := netip.ParseAddrPort(addr.String())
		if err != nil {
			return netip.Addr{}, false
		}
		a = ap.Addr()
	}
	return ratefields.Normalize(a), true
}

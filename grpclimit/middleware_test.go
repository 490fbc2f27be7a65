package grpclimit_test

import (
	"context"
	"net"
	"testing"
	"time"

	mwratelimit "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"github.com/ratelimit-go/ratelimit/grpclimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// An Interceptor is a go-grpc-middleware v2 ratelimit.Limiter.
var _ mwratelimit.Limiter = (*grpclimit.Interceptor)(nil)

func TestGoGRPCMiddlewareRateLimitInterceptor(t *testing.T) {
	b, _ := bucket(t)
	in, err := grpclimit.NewInterceptor(b, byPeer(t))
	require.NoError(t, err)
	c := serve(t,
		grpc.UnaryInterceptor(mwratelimit.UnaryServerInterceptor(in)),
		grpc.StreamInterceptor(mwratelimit.StreamServerInterceptor(in)))

	hdr, err := check(t, c)
	require.NoError(t, err)
	assert.Equal(t, map[string][]string{
		"ratelimit-limit": {"3"}, "ratelimit-remaining": {"2"}, "ratelimit-reset": {"1"},
		"ratelimit-policy": {`"default";q=3;w=2`}, "ratelimit": {`"default";r=2;t=1`},
	}, rateFields(hdr))

	// A stream through the middleware's stream interceptor is counted too.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = s.Recv()
	require.NoError(t, err)
	shdr, err := s.Header()
	require.NoError(t, err)
	assert.Equal(t, []string{"1"}, shdr["ratelimit-remaining"])

	_, err = check(t, c)
	require.NoError(t, err)

	// Denied: the middleware answers ResourceExhausted with its own status,
	// which quotes ours but drops its details; the metadata gets through.
	hdr, err = check(t, c)
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "grpc_ratelimit middleware")
	assert.Contains(t, status.Convert(err).Message(), `rate limit exceeded (policy "default"); retry after 500ms`)
	assert.Equal(t, []string{"1"}, hdr["retry-after"])
	ri, qf := details(t, err)
	assert.Nil(t, ri, "the middleware drops status details")
	assert.Nil(t, qf)
}

func TestLimitReturnsTheStatusWithRetryInfo(t *testing.T) {
	b, _ := bucket(t)
	in, err := grpclimit.NewInterceptor(b, func(context.Context, string) (string, error) { return "k", nil })
	require.NoError(t, err)
	ctx := context.Background() // no server stream: no method, and no header to set
	for range 3 {
		require.NoError(t, in.Limit(ctx))
	}
	err = in.Limit(ctx)
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	ri, _ := details(t, err)
	require.NotNil(t, ri)
	assert.Equal(t, 500*time.Millisecond, ri.GetRetryDelay().AsDuration())
}

func TestKeyByPeer(t *testing.T) {
	at := func(addr net.Addr) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{Addr: addr})
	}
	tcp := func(s string, port int) net.Addr { return &net.TCPAddr{IP: net.ParseIP(s), Port: port} }
	def, err := grpclimit.KeyByPeer(grpclimit.PeerConfig{})
	require.NoError(t, err)
	exact, err := grpclimit.KeyByPeer(grpclimit.PeerConfig{IPv6Prefix: 128})
	require.NoError(t, err)
	tests := []struct {
		name     string
		key      grpclimit.KeyFunc
		ctx      context.Context
		want     string
		wantNoIP bool
	}{
		{"IPv4 without its port", def, at(tcp("192.0.2.7", 5555)), "192.0.2.7", false},
		{"IPv4-mapped IPv6 as IPv4", def, at(tcp("::ffff:192.0.2.7", 1)), "192.0.2.7", false},
		{"NAT64 client as IPv4", def, at(tcp("64:ff9b::192.0.2.7", 1)), "192.0.2.7", false},
		{"another NAT64 client", def, at(tcp("64:ff9b::192.0.2.8", 1)), "192.0.2.8", false},
		{"SIIT-translated client as IPv4", def, at(tcp("::ffff:0:192.0.2.7", 1)), "192.0.2.7", false},
		{"NAT64 client through another net.Addr", def, at(&net.UDPAddr{IP: net.ParseIP("64:ff9b::198.51.100.1"), Port: 9}), "198.51.100.1", false},
		{"IPv6 by its /64", def, at(tcp("2001:db8:1:2:3:4:5:6", 1)), "2001:db8:1:2::/64", false},
		{"IPv6 alone with 128", exact, at(tcp("2001:db8:1:2:3:4:5:6", 1)), "2001:db8:1:2:3:4:5:6", false},
		{"IPv6 zone dropped", exact, at(&net.TCPAddr{IP: net.ParseIP("fe80::1"), Zone: "eth0"}), "fe80::1", false},
		{"other net.Addr parsed", def, at(&net.UDPAddr{IP: net.ParseIP("198.51.100.1"), Port: 9}), "198.51.100.1", false},
		{"Unix socket", def, at(&net.UnixAddr{Name: "/tmp/s", Net: "unix"}), "", true},
		{"no peer", def, context.Background(), "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.key(tt.ctx, "/x.Y/Z")
			if tt.wantNoIP {
				assert.ErrorIs(t, err, grpclimit.ErrNoKey)
				_, isStatus := status.FromError(err)
				assert.False(t, isStatus, "answered codes.Internal")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
	for _, bits := range []int{-1, 129} {
		_, err := grpclimit.KeyByPeer(grpclimit.PeerConfig{IPv6Prefix: bits})
		assert.Error(t, err)
	}
}

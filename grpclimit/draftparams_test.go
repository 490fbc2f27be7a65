package grpclimit_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/grpclimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each policy's t is its own effective window: a per-second bucket's is
// the second its next unit takes at most, not the 27 days until a monthly
// quota beside it is full again.
func TestEachPolicyCarriesItsOwnEffectiveWindow(t *testing.T) {
	clock := ratelimittest.NewClock(time.Date(2026, 11, 4, 0, 0, 0, 0, time.UTC)) // 27 days before the month ends
	rps, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(5), 5, ratelimit.WithClock(clock))
	require.NoError(t, err)
	monthly, err := ratelimit.NewCalendarWindow(1000, ratelimit.Calendar{Period: ratelimit.CalendarMonth, Location: time.UTC}, ratelimit.WithClock(clock))
	require.NoError(t, err)
	c, err := ratelimit.NewComposite(ratelimit.Part{Name: "rps", Limiter: rps}, ratelimit.Part{Name: "monthly", Limiter: monthly})
	require.NoError(t, err)
	in, err := grpclimit.NewInterceptor(c, grpclimit.KeyByMetadata("x-api-key"))
	require.NoError(t, err)
	cl := serve(t, interceptors(in)...)
	hdr, err := check(t, cl, "x-api-key", "alice")
	require.NoError(t, err)
	assert.Equal(t, []string{`"rps";r=4;t=1, "monthly";r=999;t=2332800`}, hdr["ratelimit"])
	assert.Equal(t, []string{"2332800"}, hdr["ratelimit-reset"], "the legacy field: until both are full")
}

// WithQuotaUnit names the unit of the policies that count units; with
// WithPartitionKey, every item carries pk, a keyed hash of the call's key,
// never the key.
func TestQuotaUnitAndPartitionKeyInMetadata(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	requests, err := ratelimit.NewGCRA(60, time.Minute, ratelimit.WithClock(clock))
	require.NoError(t, err)
	tokens, err := ratelimit.NewTokenBucket(ratelimit.PerMinute(100000), 100000, ratelimit.WithClock(clock))
	require.NoError(t, err)
	c, err := ratelimit.NewComposite(
		ratelimit.Part{Name: "requests", Limiter: requests, PerCall: true},
		ratelimit.Part{Name: "tokens", Limiter: tokens},
	)
	require.NoError(t, err)
	secret := []byte("0123456789abcdef")
	in, err := grpclimit.NewInterceptor(c, grpclimit.KeyByMetadata("x-api-key"),
		grpclimit.WithQuotaUnit("tokens"), grpclimit.WithPartitionKey(secret),
		grpclimit.WithCost(func(context.Context, string) (int, error) { return 500, nil }))
	require.NoError(t, err)
	cl := serve(t, interceptors(in)...)
	hdr, err := check(t, cl, "x-api-key", "alice-api-key")
	require.NoError(t, err)
	assert.Equal(t, []string{`"requests";q=60;w=60, "tokens";q=100000;w=60;qu="tokens"`}, hdr["ratelimit-policy"])
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("alice-api-key"))
	pk := ";pk=:" + base64.StdEncoding.EncodeToString(mac.Sum(nil)[:16]) + ":"
	assert.Equal(t, []string{`"requests";r=59;t=1` + pk + `, "tokens";r=99500;t=1` + pk}, hdr["ratelimit"])
	assert.NotContains(t, hdr["ratelimit"][0], "alice")
}

// The options refuse what they cannot send.
func TestQuotaUnitAndPartitionKeyRefuseBadValues(t *testing.T) {
	b, _ := bucket(t)
	for _, opt := range []grpclimit.Option{
		grpclimit.WithQuotaUnit(""),
		grpclimit.WithQuotaUnit("Tokens"),
		grpclimit.WithQuotaUnit(`to"kens`),
		grpclimit.WithQuotaUnit(strings.Repeat("a", 65)),
		grpclimit.WithPartitionKey(make([]byte, 15)),
	} {
		_, err := grpclimit.NewInterceptor(b, byPeer(t), opt)
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	}
}

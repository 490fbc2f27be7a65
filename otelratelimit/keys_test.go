package otelratelimit_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/otelratelimit"
)

func TestAKeyTooLongIsCountedAsInvalidKey(t *testing.T) {
	h, reader := newHooks(t)
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 2, ratelimit.WithHooks(h), ratelimit.WithName("api"), ratelimit.WithMaxKeyLength(8))
	require.NoError(t, err)
	ctx := context.Background()
	_, err = tb.Allow(ctx, "123456789", 1)
	require.ErrorIs(t, err, ratelimit.ErrInvalidKey)
	_, err = tb.Settle(ctx, "123456789", 1, 2)
	require.ErrorIs(t, err, ratelimit.ErrInvalidKey)

	got := collect(t, reader)
	assert.Equal(t, map[string]int64{
		"error.type=invalid_key,ratelimit.limiter=api,ratelimit.outcome=error,ratelimit.source=backend": 1,
	}, sums(t, got[otelratelimit.DecisionsName]))
	assert.Equal(t, map[string]int64{
		"error.type=invalid_key,ratelimit.limiter=api,ratelimit.operation=settle,ratelimit.outcome=error": 1,
	}, sums(t, got[otelratelimit.AdjustmentsName]))
}

func TestNoMeasurementCarriesAKey(t *testing.T) {
	// Even from a limiter that shows its keys whole to its hooks, no
	// attribute of any measurement holds one.
	const secret = "sk_live_0123456789abcdef"
	h, reader := newHooks(t)
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 1, ratelimit.WithHooks(h), ratelimit.WithKeysShown())
	require.NoError(t, err)
	ctx := context.Background()
	for range 2 {
		_, err := tb.Allow(ctx, secret, 1)
		require.NoError(t, err)
	}
	_, err = tb.Allow(ctx, secret, 2)
	require.Error(t, err)
	_, err = tb.Refund(ctx, secret, 1)
	require.NoError(t, err)
	require.NoError(t, tb.Reset(ctx, secret))

	got := collect(t, reader)
	require.NotEmpty(t, got)
	for name, m := range got {
		var sets []string
		switch name {
		case otelratelimit.DurationName:
			for set := range counts(t, m) {
				sets = append(sets, set)
			}
		default:
			for set := range sums(t, m) {
				sets = append(sets, set)
			}
		}
		for _, set := range sets {
			assert.False(t, strings.Contains(set, secret) || strings.Contains(set, ratelimit.KeyDigest(secret)), "%s: %s", name, set)
		}
	}
}

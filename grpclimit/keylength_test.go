package grpclimit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/grpclimit"
)

func TestAKeyTheLimiterRefusesAsTooLongIsInvalidArgumentAndNeverPasses(t *testing.T) {
	// Whatever the options, even WithPolicyErrorsPass, a call whose key
	// the limiter refuses is answered codes.InvalidArgument and its
	// handler never runs.
	for name, opts := range map[string][]grpclimit.Option{
		"default":              nil,
		"WithPolicyErrorsPass": {grpclimit.WithPolicyErrorsPass()},
		"WithFailClosed":       {grpclimit.WithFailClosed(time.Second)},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 5, ratelimit.WithMaxKeyLength(64))
			require.NoError(t, err)
			var onError int
			in, err := grpclimit.NewInterceptor(b, byPlan, append(opts, grpclimit.WithOnError(func(_ context.Context, _ string, _ error) { onError++ }))...)
			require.NoError(t, err)
			for _, key := range []string{strings.Repeat("k", 1<<20), strings.Repeat("k", 65)} {
				md, ran, err := unary(t, in, key)
				assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
				assert.NotContains(t, status.Convert(err).Message(), "kkkk", "the key is not sent back")
				assert.False(t, ran)
				assert.Empty(t, md)
			}
			assert.Zero(t, onError, "a key error, not a limiter failure")
			_, ran, err := unary(t, in, "short")
			require.NoError(t, err)
			assert.True(t, ran, "a key within the bound is limited as before")
		})
	}
}

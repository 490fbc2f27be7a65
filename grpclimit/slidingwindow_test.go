package grpclimit_test

import (
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/grpclimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A sliding log and a sliding counter with units taken send t: the log of
// 5 per 10 s with calls at 0, 2 s, 5 s and 6 s, the 4 s until the first
// leaves; the counter of 5 per 10 s, the 6 s until one call more than r
// can have been made (the one left, made at once, counts with the 4 after
// the window's roll at 10 s, and 5 weigh 4 from 12 s).
func TestSlidingWindowsSendTheirEffectiveWindow(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	login, err := ratelimit.NewSlidingLog(5, 10*time.Second, ratelimit.WithClock(clock))
	require.NoError(t, err)
	api, err := ratelimit.NewSlidingCounter(5, 10*time.Second, ratelimit.WithClock(clock))
	require.NoError(t, err)
	c, err := ratelimit.NewComposite(ratelimit.Part{Name: "login", Limiter: login}, ratelimit.Part{Name: "api", Limiter: api})
	require.NoError(t, err)
	in, err := grpclimit.NewInterceptor(c, grpclimit.KeyByMetadata("x-api-key"))
	require.NoError(t, err)
	cl := serve(t, interceptors(in)...)
	for _, step := range []time.Duration{0, 2 * time.Second, 3 * time.Second} {
		clock.Advance(step)
		_, err := check(t, cl, "x-api-key", "alice")
		require.NoError(t, err)
	}
	clock.Advance(time.Second)
	hdr, err := check(t, cl, "x-api-key", "alice")
	require.NoError(t, err)
	assert.Equal(t, []string{`"login";r=1;t=4, "api";r=1;t=6`}, hdr["ratelimit"])
}

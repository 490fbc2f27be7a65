package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// TestACompositeCalendarPartReportsTheLengthOfItsWindowOpenNow: a
// Composite's calendar part, in process and on Redis, gives its Decision
// and Policies the length of the day open now, 25 hours on the day Berlin
// falls back, as the limiter alone does; its other parts keep theirs.
func TestACompositeCalendarPartReportsTheLengthOfItsWindowOpenNow(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	fallBack := time.Date(2026, time.October, 25, 12, 0, 0, 0, berlin)
	day := Calendar{Period: CalendarDay, Location: berlin}
	ctx := context.Background()

	clock := ratelimittest.NewClock(fallBack)
	perMinute, err := NewFixedWindow(3, time.Minute, WithClock(clock))
	require.NoError(t, err)
	daily, err := NewCalendarWindow(100, day, WithClock(clock))
	require.NoError(t, err)
	local, err := NewComposite(Part{Name: "minute", Limiter: perMinute}, Part{Name: "day", Limiter: daily})
	require.NoError(t, err)

	_, client, _ := redistest.Miniredis(t, fallBack)
	redisMinute, err := NewRedisFixedWindow(client, 3, time.Minute)
	require.NoError(t, err)
	redisDaily, err := NewRedisCalendarWindow(client, 100, day, WithClock(ratelimittest.NewClock(fallBack)))
	require.NoError(t, err)
	remote, err := NewComposite(Part{Name: "minute", Limiter: redisMinute}, Part{Name: "day", Limiter: redisDaily})
	require.NoError(t, err)

	for name, c := range map[string]*Composite{"in process": local, "Redis": remote} {
		d, err := c.Decide(ctx, "k", 1)
		require.NoError(t, err, name)
		require.Len(t, d.Policies, 2, name)
		assert.Equal(t, time.Minute, d.Policies[0].Window, name)
		assert.Equal(t, 25*time.Hour, d.Policies[1].Window, name)
		assert.Equal(t, 12*time.Hour, d.Parts[1].ResetAfter, name)
		policies, err := c.Policies(ctx, "k")
		require.NoError(t, err, name)
		assert.Equal(t, d.Policies, policies, name)
		assert.Equal(t, 24*time.Hour, c.parts[1].Limiter.(interface{ Policy() Policy }).Policy().Window, "the limiter's own Policy stays nominal")
	}
}

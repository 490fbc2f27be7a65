package ratelimit

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGCRARoundsTheEmissionInterval(t *testing.T) {
	// 1 minute / 7 = 8571428571.43 ns, rounded to 8571428571 ns; in Redis
	// 8571428.57 µs, rounded to 8571429 µs.
	g, err := NewGCRA(7, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, 7*8571428571*time.Nanosecond, g.Policy().Window)
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	rg, err := NewRedisGCRA(client, 7, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, 7*8571429*time.Microsecond, rg.Policy().Window)
}

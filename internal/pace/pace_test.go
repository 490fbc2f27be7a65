package pace

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestSleepEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.Equal(t, context.Canceled, Sleep(ctx, time.Hour))
	assert.NoError(t, Sleep(context.Background(), time.Nanosecond))
}

func TestJitterStaysWithinItsBound(t *testing.T) {
	assert.Equal(t, time.Duration(0), Jitter(0))
	assert.Equal(t, time.Duration(0), Jitter(-time.Second))
	for range 1000 {
		j := Jitter(3)
		assert.GreaterOrEqual(t, j, time.Duration(0))
		assert.LessOrEqual(t, j, time.Duration(3))
	}
}

package leasehold_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/leasehold"
)

func TestInFlightIndexFindsTheFirstPolicyInFlight(t *testing.T) {
	rate := ratelimit.NamedPolicy{Name: "rate", Policy: ratelimit.Policy{Limit: 10, Window: time.Second}}
	running := ratelimit.NamedPolicy{Name: "running", Policy: ratelimit.Policy{Limit: 5, Window: time.Minute}, InFlight: true}
	assert.Equal(t, -1, leasehold.InFlightIndex(nil))
	assert.Equal(t, -1, leasehold.InFlightIndex([]ratelimit.NamedPolicy{rate}))
	assert.Equal(t, 1, leasehold.InFlightIndex([]ratelimit.NamedPolicy{rate, running, running}))
}

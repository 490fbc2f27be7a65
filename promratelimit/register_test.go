package promratelimit_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/promratelimit"
)

func TestASecondHooksOnTheSameRegistryIsAnErrorAndRegistersNothing(t *testing.T) {
	reg := prometheus.NewRegistry()
	first, err := promratelimit.NewHooks(reg)
	require.NoError(t, err)

	second, err := promratelimit.NewHooks(reg)
	assert.Nil(t, second)
	var dup prometheus.AlreadyRegisteredError
	require.ErrorAs(t, err, &dup)

	// The first Hooks still records, to the one set of metrics.
	first.Decided(ratelimit.Event{Limiter: "api", Cost: 1, Decision: ratelimit.Decision{Result: ratelimit.Result{Allowed: true}}})
	n, err := testutil.GatherAndCount(reg, promratelimit.DecisionsName)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
}

// refusing is a Registerer that refuses its third collector and keeps
// the others.
type refusing struct {
	kept map[prometheus.Collector]bool
	n    int
}

func (r *refusing) Register(c prometheus.Collector) error {
	if r.n++; r.n == 3 {
		return errors.New("refused")
	}
	r.kept[c] = true
	return nil
}

func (r *refusing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *refusing) Unregister(c prometheus.Collector) bool {
	had := r.kept[c]
	delete(r.kept, c)
	return had
}

func TestARefusedMetricIsAnErrorAndLeavesNoneOfOursRegistered(t *testing.T) {
	reg := &refusing{kept: map[prometheus.Collector]bool{}}
	h, err := promratelimit.NewHooks(reg)
	assert.Nil(t, h)
	assert.EqualError(t, err, "promratelimit: NewHooks: refused")
	assert.Empty(t, reg.kept)
}

func TestAMetricOfTheSameNameAlreadyRegisteredIsAnError(t *testing.T) {
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(prometheus.NewGauge(prometheus.GaugeOpts{Name: promratelimit.LeasesHeldName, Help: "someone else's"})))
	_, err := promratelimit.NewHooks(reg)
	assert.ErrorContains(t, err, promratelimit.LeasesHeldName)
}

func TestNewHooksNeverRegistersOnTheDefaultRegistry(t *testing.T) {
	_, err := promratelimit.NewHooks(prometheus.NewRegistry())
	require.NoError(t, err)
	families, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	for _, f := range families {
		assert.False(t, strings.HasPrefix(f.GetName(), "ratelimit_"), f.GetName())
	}
}

func TestBadArgumentsAreErrorsNamingThem(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, c := range []struct {
		name string
		reg  prometheus.Registerer
		opt  promratelimit.Option
		want string
	}{
		{"nil registerer", nil, nil, "nil Registerer"},
		{"nil option", reg, nil, "option 0 is nil"},
		{"no duration buckets", reg, promratelimit.WithDurationBuckets(), "WithDurationBuckets: no buckets"},
		{"retry-after buckets out of order", reg, promratelimit.WithRetryAfterBuckets(1, 1), "WithRetryAfterBuckets: bucket 1 (1) is not above bucket 0 (1)"},
		{"no routes", reg, promratelimit.WithMaxRoutes(0), "WithMaxRoutes: 0 routes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var opts []promratelimit.Option
			if c.reg != nil {
				opts = append(opts, c.opt)
			}
			h, err := promratelimit.NewHooks(c.reg, opts...)
			assert.Nil(t, h)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	h, err := promratelimit.NewHooks(reg)
	require.NoError(t, err)
	_, err = h.Breaker("")
	assert.EqualError(t, err, "promratelimit: Breaker: empty name")
}

func TestEachGuardsBreakerIsASeriesOfItsOwnWhenNamed(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, err := promratelimit.NewHooks(reg)
	require.NoError(t, err)
	orders, err := h.Breaker("orders")
	require.NoError(t, err)
	search, err := h.Breaker("search")
	require.NoError(t, err)

	orders.BreakerChanged(ratelimit.BreakerClosed, ratelimit.BreakerOpen)
	orders.BreakerChanged(ratelimit.BreakerOpen, ratelimit.BreakerHalfOpen)
	search.BreakerChanged(ratelimit.BreakerClosed, ratelimit.BreakerOpen)
	search.BreakerChanged(ratelimit.BreakerOpen, ratelimit.BreakerHalfOpen)
	search.BreakerChanged(ratelimit.BreakerHalfOpen, ratelimit.BreakerClosed)

	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ratelimit_breakers Circuit breakers in each state other than closed (open, half_open), by breaker.
# TYPE ratelimit_breakers gauge
ratelimit_breakers{breaker="orders",state="half_open"} 1
ratelimit_breakers{breaker="orders",state="open"} 0
ratelimit_breakers{breaker="search",state="half_open"} 0
ratelimit_breakers{breaker="search",state="open"} 0
# HELP ratelimit_breaker_transitions_total Circuit breaker state changes, by breaker and the state changed to.
# TYPE ratelimit_breaker_transitions_total counter
ratelimit_breaker_transitions_total{breaker="orders",to="half_open"} 1
ratelimit_breaker_transitions_total{breaker="orders",to="open"} 1
ratelimit_breaker_transitions_total{breaker="search",to="closed"} 1
ratelimit_breaker_transitions_total{breaker="search",to="half_open"} 1
ratelimit_breaker_transitions_total{breaker="search",to="open"} 1
`), promratelimit.BreakersName, promratelimit.TransitionsName))
}

func TestRoutesPastTheMaximumAreCountedAsOther(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, err := promratelimit.NewHooks(reg, promratelimit.WithMaxRoutes(2))
	require.NoError(t, err)
	allowed := ratelimit.Decision{Result: ratelimit.Result{Allowed: true}, Policy: ratelimit.NamedPolicy{Name: "pro"}}
	for _, route := range []string{"/a", "/b", "/c", "/a", "/d"} {
		h.Observe(route, allowed, nil)
	}
	h.Observe("/b", ratelimit.Decision{}, errors.New("no key"))
	h.Observe("/b", ratelimit.Decision{Source: ratelimit.FromShadow, WouldDeny: true, Result: ratelimit.Result{Allowed: true}}, nil)

	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ratelimit_requests_total Requests a middleware decided on, by route, policy and outcome (allowed, denied, rejected for the request's own mistake, error for any other error).
# TYPE ratelimit_requests_total counter
ratelimit_requests_total{outcome="allowed",policy="pro",route="/a"} 2
ratelimit_requests_total{outcome="allowed",policy="pro",route="/b"} 1
ratelimit_requests_total{outcome="allowed",policy="pro",route="_other"} 2
ratelimit_requests_total{outcome="denied",policy="none",route="/b"} 1
ratelimit_requests_total{outcome="error",policy="none",route="/b"} 1
`), promratelimit.RequestsName))
}

package promratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/outbound"
	"github.com/ratelimit-go/ratelimit/promratelimit"
)

func TestAScrapeShowsTheDocumentedOutboundSeriesAfterAKnownSequenceOfEvents(t *testing.T) {
	reg := prometheus.NewRegistry()
	observe, err := promratelimit.NewOutboundObserver(reg, promratelimit.WithLimiterName("partner"))
	require.NoError(t, err)
	const secret = "token-7f3a" // a partition that must never become a label
	for _, e := range []outbound.Event{
		{Kind: outbound.Waited, Partition: secret, Wait: 20 * time.Millisecond},
		{Kind: outbound.Waited, Partition: secret, Wait: 3 * time.Second},
		{Kind: outbound.Waited, Partition: secret, Wait: -time.Millisecond}, // a clock stepped back: 0
		{Kind: outbound.Refused, Partition: secret, Err: fmt.Errorf("%w: 3s to wait", outbound.ErrLimited)},
		{Kind: outbound.Refused, Partition: secret, Err: fmt.Errorf("%w: past the deadline: %w", outbound.ErrLimited, context.DeadlineExceeded)},
		{Kind: outbound.Refused, Partition: secret, Wait: time.Second, Err: fmt.Errorf("outbound: waiting 2s: %w", context.Canceled)},
		{Kind: outbound.Refused, Partition: secret, Err: fmt.Errorf("outbound: the limiter: %w", ratelimit.ErrBackend)},
		{Kind: outbound.UpstreamLimited, Partition: secret, Status: http.StatusTooManyRequests},
		{Kind: outbound.UpstreamLimited, Partition: secret, Status: http.StatusTooManyRequests},
		{Kind: outbound.UpstreamLimited, Partition: secret, Status: http.StatusServiceUnavailable},
		{Kind: outbound.Paused, Partition: secret, Pause: time.Second},
		{Kind: outbound.Paused, Partition: secret, Pause: 15 * time.Minute},
		{Kind: outbound.Learned, Partition: secret, Policy: ratelimit.Policy{Limit: 5, Window: time.Second}},
		{Kind: outbound.Learned, Partition: secret},
		{Kind: outbound.Retried, Partition: secret, Status: http.StatusTooManyRequests, Attempt: 2},
		{Kind: outbound.StoreFailed, Partition: secret, Err: fmt.Errorf("outbound: %w", ratelimit.ErrBackend)},
		{Kind: outbound.StoreFailed, Partition: secret, Err: errors.New("something else")},
		{Kind: outbound.SettleFailed, Partition: secret, Err: fmt.Errorf("outbound: Settle: %w", ratelimit.ErrInvalidConfig)},
		{Kind: outbound.EventKind(99), Partition: secret}, // unknown: ignored
	} {
		observe(e)
	}

	assertDocumented(t, reg, true)
	samples, buckets := scrape(t, reg)
	assert.Equal(t, []string{
		`ratelimit_outbound_learned_total{limiter="partner"} 2`,
		`ratelimit_outbound_pause_seconds_sum{limiter="partner"} 901`,
		`ratelimit_outbound_pause_seconds_count{limiter="partner"} 2`,
		`ratelimit_outbound_refusals_total{error_type="",limiter="partner",reason="limited"} 2`,
		`ratelimit_outbound_refusals_total{error_type="backend",limiter="partner",reason="error"} 1`,
		`ratelimit_outbound_refusals_total{error_type="canceled",limiter="partner",reason="error"} 1`,
		`ratelimit_outbound_retries_total{limiter="partner",status="429"} 1`,
		`ratelimit_outbound_settle_failures_total{error_type="invalid_config",limiter="partner"} 1`,
		`ratelimit_outbound_store_failures_total{error_type="backend",limiter="partner"} 1`,
		`ratelimit_outbound_store_failures_total{error_type="other",limiter="partner"} 1`,
		`ratelimit_outbound_upstream_limited_total{limiter="partner",status="429"} 2`,
		`ratelimit_outbound_upstream_limited_total{limiter="partner",status="503"} 1`,
		`ratelimit_outbound_wait_seconds_sum{limiter="partner"} 3.02`,
		`ratelimit_outbound_wait_seconds_count{limiter="partner"} 3`,
	}, samples)
	// The waits of 0 s, 20 ms and 3 s; the pauses of 1 s and 15 min.
	for _, line := range []string{
		`ratelimit_outbound_wait_seconds_bucket{limiter="partner",le="0.001"} 1`,
		`ratelimit_outbound_wait_seconds_bucket{limiter="partner",le="0.01"} 1`,
		`ratelimit_outbound_wait_seconds_bucket{limiter="partner",le="0.025"} 2`,
		`ratelimit_outbound_wait_seconds_bucket{limiter="partner",le="2.5"} 2`,
		`ratelimit_outbound_wait_seconds_bucket{limiter="partner",le="5"} 3`,
		`ratelimit_outbound_pause_seconds_bucket{limiter="partner",le="0.5"} 0`,
		`ratelimit_outbound_pause_seconds_bucket{limiter="partner",le="1"} 1`,
		`ratelimit_outbound_pause_seconds_bucket{limiter="partner",le="600"} 1`,
		`ratelimit_outbound_pause_seconds_bucket{limiter="partner",le="900"} 2`,
	} {
		assert.True(t, slices.Contains(buckets, line), "missing %s", line)
	}
	for _, line := range append(samples, buckets...) {
		assert.NotContains(t, line, secret)
	}
}

func TestAnUnnamedOutboundObserverHasTheDefaultLimiterLabelAndNoSeriesBeforeItsFirstEvent(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := promratelimit.NewOutboundObserver(reg)
	require.NoError(t, err)
	samples, _ := scrape(t, reg)
	assert.Equal(t, []string{
		`ratelimit_outbound_learned_total{limiter="default"} 0`,
		`ratelimit_outbound_pause_seconds_sum{limiter="default"} 0`,
		`ratelimit_outbound_pause_seconds_count{limiter="default"} 0`,
		`ratelimit_outbound_wait_seconds_sum{limiter="default"} 0`,
		`ratelimit_outbound_wait_seconds_count{limiter="default"} 0`,
	}, samples, "the metrics without a label of their own are there at 0, the others appear with their first event")
}

func TestStatusesPastTheMaximumOrOutOfRangeAreCountedAsOther(t *testing.T) {
	reg := prometheus.NewRegistry()
	observe, err := promratelimit.NewOutboundObserver(reg)
	require.NoError(t, err)
	observe(outbound.Event{Kind: outbound.UpstreamLimited, Status: 0}) // no HTTP status
	observe(outbound.Event{Kind: outbound.UpstreamLimited, Status: 1000})
	for s := 400; s < 400+promratelimit.MaxStatuses+3; s++ {
		observe(outbound.Event{Kind: outbound.UpstreamLimited, Status: s})
	}
	observe(outbound.Event{Kind: outbound.UpstreamLimited, Status: 400}) // seen: kept apart
	observe(outbound.Event{Kind: outbound.Retried, Status: 599})         // another metric, its own statuses

	want := []string{
		`# HELP ratelimit_outbound_upstream_limited_total Answers by which the upstream refused a call for its limit, by limiter and status.`,
		`# TYPE ratelimit_outbound_upstream_limited_total counter`,
		`ratelimit_outbound_upstream_limited_total{limiter="default",status="400"} 2`,
	}
	for s := 401; s < 400+promratelimit.MaxStatuses; s++ {
		want = append(want, fmt.Sprintf(`ratelimit_outbound_upstream_limited_total{limiter="default",status="%d"} 1`, s))
	}
	want = append(want,
		`ratelimit_outbound_upstream_limited_total{limiter="default",status="_other"} 5`,
		`# HELP ratelimit_outbound_retries_total Outbound calls sent again after the upstream refused them, by limiter and the status that refused.`,
		`# TYPE ratelimit_outbound_retries_total counter`,
		`ratelimit_outbound_retries_total{limiter="default",status="599"} 1`,
	)
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(strings.Join(want, "\n")+"\n"),
		promratelimit.OutboundUpstreamLimitedName, promratelimit.OutboundRetriesName))
}

func TestASecondOutboundObserverOfTheSameNameOnARegistryIsAnError(t *testing.T) {
	reg := prometheus.NewRegistry()
	first, err := promratelimit.NewOutboundObserver(reg, promratelimit.WithLimiterName("partner"))
	require.NoError(t, err)

	second, err := promratelimit.NewOutboundObserver(reg, promratelimit.WithLimiterName("partner"))
	assert.Nil(t, second)
	var dup prometheus.AlreadyRegisteredError
	require.ErrorAs(t, err, &dup)
	assert.ErrorContains(t, err, "promratelimit: NewOutboundObserver: ")

	// Another name, and the Hooks, share the registry.
	other, err := promratelimit.NewOutboundObserver(reg, promratelimit.WithLimiterName("payments"))
	require.NoError(t, err)
	_, err = promratelimit.NewHooks(reg)
	require.NoError(t, err)

	first(outbound.Event{Kind: outbound.Learned})
	other(outbound.Event{Kind: outbound.Learned})
	other(outbound.Event{Kind: outbound.Learned})
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ratelimit_outbound_learned_total Changes of the limit the limiter applies that upstreams' answers made, by limiter.
# TYPE ratelimit_outbound_learned_total counter
ratelimit_outbound_learned_total{limiter="partner"} 1
ratelimit_outbound_learned_total{limiter="payments"} 2
`), promratelimit.OutboundLearnedName))
}

func TestARefusedOutboundMetricIsAnErrorAndLeavesNoneOfOursRegistered(t *testing.T) {
	reg := &refusing{kept: map[prometheus.Collector]bool{}}
	observe, err := promratelimit.NewOutboundObserver(reg)
	assert.Nil(t, observe)
	assert.EqualError(t, err, "promratelimit: NewOutboundObserver: refused")
	assert.Empty(t, reg.kept)
}

func TestBadOutboundArgumentsAreErrorsNamingThem(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := promratelimit.NewOutboundObserver(nil)
	assert.EqualError(t, err, "promratelimit: NewOutboundObserver: nil Registerer")
	for _, c := range []struct {
		name string
		opt  promratelimit.Option
		want string
	}{
		{"nil option", nil, "option 0 is nil"},
		{"empty name", promratelimit.WithLimiterName(""), "WithLimiterName: empty name"},
		{"name not UTF-8", promratelimit.WithLimiterName("\xff"), `WithLimiterName: "\xff" is not valid UTF-8`},
		{"no wait buckets", promratelimit.WithWaitBuckets(), "WithWaitBuckets: no buckets"},
		{"pause buckets out of order", promratelimit.WithPauseBuckets(2, 1), "WithPauseBuckets: bucket 1 (1) is not above bucket 0 (2)"},
		{"an option of NewHooks", promratelimit.WithMaxRoutes(3), "WithMaxRoutes is an option of NewHooks, not of NewOutboundObserver"},
		{"buckets of NewHooks", promratelimit.WithDurationBuckets(1), "WithDurationBuckets is an option of NewHooks"},
	} {
		observe, err := promratelimit.NewOutboundObserver(reg, c.opt)
		assert.Nil(t, observe, c.name)
		assert.ErrorContains(t, err, c.want, c.name)
	}
	for _, opt := range []promratelimit.Option{
		promratelimit.WithLimiterName("partner"),
		promratelimit.WithWaitBuckets(1),
		promratelimit.WithPauseBuckets(1),
	} {
		h, err := promratelimit.NewHooks(reg, opt)
		assert.Nil(t, h)
		assert.ErrorContains(t, err, "is an option of NewOutboundObserver, not of NewHooks")
	}
	n, err := testutil.GatherAndCount(reg)
	require.NoError(t, err)
	assert.Zero(t, n, "nothing was registered")
}

func TestTheOutboundBucketOptionsReplaceTheBuckets(t *testing.T) {
	reg := prometheus.NewRegistry()
	observe, err := promratelimit.NewOutboundObserver(reg,
		promratelimit.WithWaitBuckets(0.5), promratelimit.WithPauseBuckets(10, 20))
	require.NoError(t, err)
	observe(outbound.Event{Kind: outbound.Waited, Wait: time.Second})
	observe(outbound.Event{Kind: outbound.Paused, Pause: 15 * time.Second})
	_, buckets := scrape(t, reg)
	assert.Equal(t, []string{
		`ratelimit_outbound_pause_seconds_bucket{limiter="default",le="10"} 0`,
		`ratelimit_outbound_pause_seconds_bucket{limiter="default",le="20"} 1`,
		`ratelimit_outbound_pause_seconds_bucket{limiter="default",le="+Inf"} 1`,
		`ratelimit_outbound_wait_seconds_bucket{limiter="default",le="0.5"} 0`,
		`ratelimit_outbound_wait_seconds_bucket{limiter="default",le="+Inf"} 1`,
	}, buckets)
}

func TestConcurrentOutboundEventsAreAllCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	observe, err := promratelimit.NewOutboundObserver(reg)
	require.NoError(t, err)
	const workers, each = 8, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				observe(outbound.Event{Kind: outbound.UpstreamLimited, Status: 429 + 74*((w+i)%2)}) // 429 or 503
				observe(outbound.Event{Kind: outbound.Refused, Err: context.Canceled})
			}
		})
	}
	wg.Wait()

	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(fmt.Sprintf(`
# HELP ratelimit_outbound_upstream_limited_total Answers by which the upstream refused a call for its limit, by limiter and status.
# TYPE ratelimit_outbound_upstream_limited_total counter
ratelimit_outbound_upstream_limited_total{limiter="default",status="429"} %[1]d
ratelimit_outbound_upstream_limited_total{limiter="default",status="503"} %[1]d
# HELP ratelimit_outbound_refusals_total Outbound calls not sent, by limiter, reason (limited: the wait allowed was too short; error) and error_type.
# TYPE ratelimit_outbound_refusals_total counter
ratelimit_outbound_refusals_total{error_type="canceled",limiter="default",reason="error"} %[2]d
`, workers*each/2, workers*each)), promratelimit.OutboundUpstreamLimitedName, promratelimit.OutboundRefusalsName))
}

func TestTheOutboundObserverAllocatesNothingOnceTheSeriesExist(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	observe, err := promratelimit.NewOutboundObserver(prometheus.NewRegistry(), promratelimit.WithLimiterName("partner"))
	require.NoError(t, err)
	for _, e := range []outbound.Event{
		{Kind: outbound.Waited, Partition: "p", Wait: time.Millisecond},
		{Kind: outbound.Refused, Partition: "p", Err: outbound.ErrLimited},
		{Kind: outbound.Refused, Partition: "p", Err: context.Canceled},
		{Kind: outbound.UpstreamLimited, Partition: "p", Status: http.StatusTooManyRequests},
		{Kind: outbound.UpstreamLimited, Partition: "p", Status: 1000}, // OtherStatus
		{Kind: outbound.Paused, Partition: "p", Pause: time.Second},
		{Kind: outbound.Learned, Partition: "p", Policy: ratelimit.Policy{Limit: 5, Window: time.Second}},
		{Kind: outbound.Retried, Partition: "p", Status: http.StatusTooManyRequests, Attempt: 2},
		{Kind: outbound.StoreFailed, Partition: "p", Err: ratelimit.ErrBackend},
		{Kind: outbound.SettleFailed, Partition: "p", Err: ratelimit.ErrInvalidCost},
	} {
		observe(e) // creates the series
		assert.Zero(t, testing.AllocsPerRun(100, func() { observe(e) }), e.Kind.String())
	}
}

// retryAfterSeconds reads a Retry-After of delay-seconds on a 429, so that
// the test does not depend on the default parsers' reading of it.
func retryAfterSeconds(a outbound.Answer) outbound.Lesson {
	if a.Status != http.StatusTooManyRequests {
		return outbound.Lesson{}
	}
	n, err := strconv.Atoi(strings.TrimSpace(a.Header.Get("Retry-After")))
	if err != nil || n < 0 {
		return outbound.Lesson{Limited: true}
	}
	return outbound.Lesson{Limited: true, Pause: time.Duration(n) * time.Second}
}

func TestATransportsRefused429ItsPauseRetryAndRefusalAreScraped(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()

	reg := prometheus.NewRegistry()
	observe, err := promratelimit.NewOutboundObserver(reg, promratelimit.WithLimiterName("partner"))
	require.NoError(t, err)
	// 3 calls at once, then 1 a second: the 4th call cannot be sent
	// within its deadline.
	limiter, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 3)
	require.NoError(t, err)
	const maxPause = 10 * time.Millisecond // bounds the Retry-After of 1 s, so the retry waits 10 ms
	up, err := outbound.New(limiter, outbound.Config{
		IgnorePolicies: true,
		MaxPause:       maxPause,
		NoJitter:       true,
		Parsers:        append(outbound.DefaultParsers(), retryAfterSeconds),
		Observer:       observe,
	})
	require.NoError(t, err)
	client := &http.Client{Transport: &outbound.Transport{Upstream: up, Retries: 1}}

	get := func(ctx context.Context) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	for range 2 { // the first is refused with a 429 and retried
		status, err := get(context.Background())
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = get(ctx)
	require.ErrorIs(t, err, outbound.ErrLimited)
	assert.Equal(t, int64(3), calls.Load(), "the refused call was not sent")

	samples, _ := scrape(t, reg)
	var waited string
	samples = slices.DeleteFunc(samples, func(line string) bool {
		if strings.HasPrefix(line, "ratelimit_outbound_wait_seconds_sum") {
			waited = line
			return true
		}
		return false
	})
	assert.Equal(t, []string{
		`ratelimit_outbound_learned_total{limiter="partner"} 0`,
		`ratelimit_outbound_pause_seconds_sum{limiter="partner"} 0.01`,
		`ratelimit_outbound_pause_seconds_count{limiter="partner"} 1`,
		`ratelimit_outbound_refusals_total{error_type="",limiter="partner",reason="limited"} 1`,
		`ratelimit_outbound_retries_total{limiter="partner",status="429"} 1`,
		`ratelimit_outbound_upstream_limited_total{limiter="partner",status="429"} 1`,
		`ratelimit_outbound_wait_seconds_count{limiter="partner"} 1`,
	}, samples, "only the retry waited")
	var sum float64
	_, err = fmt.Sscanf(strings.TrimPrefix(waited, `ratelimit_outbound_wait_seconds_sum{limiter="partner"} `), "%g", &sum)
	require.NoError(t, err, waited)
	assert.GreaterOrEqual(t, sum, maxPause.Seconds(), "the retry waited out the pause")
}

// An Upstream that fails fast reports a 429 that pauses its partition,
// and the call refused for it.
func ExampleNewOutboundObserver() {
	reg := prometheus.NewRegistry()
	observe, err := promratelimit.NewOutboundObserver(reg, promratelimit.WithLimiterName("partner"))
	if err != nil {
		panic(err)
	}
	limiter, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 2)
	if err != nil {
		panic(err)
	}
	up, err := outbound.New(limiter, outbound.Config{IgnorePolicies: true, MaxWait: -1, Observer: observe})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	p, err := up.Admit(ctx, "api.partner.example", 1)
	if err != nil {
		panic(err)
	}
	up.Observe(ctx, p, outbound.Answer{Status: http.StatusTooManyRequests, Header: http.Header{}, Now: time.Now()})
	_, err = up.Admit(ctx, "api.partner.example", 1) // paused: refused at once
	fmt.Println(errors.Is(err, outbound.ErrLimited))

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		panic(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		for _, name := range []string{"ratelimit_outbound_refusals_total", "ratelimit_outbound_upstream_limited_total", "ratelimit_outbound_pause_seconds_count"} {
			if strings.HasPrefix(line, name) {
				fmt.Println(line)
			}
		}
	}
	// Output:
	// true
	// ratelimit_outbound_pause_seconds_count{limiter="partner"} 1
	// ratelimit_outbound_refusals_total{error_type="",limiter="partner",reason="limited"} 1
	// ratelimit_outbound_upstream_limited_total{limiter="partner",status="429"} 1
}

package otelratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/otelratelimit"
	"github.com/ratelimit-go/ratelimit/outbound"
)

// newOutboundObserver returns an outbound observer recording to a
// ManualReader.
func newOutboundObserver(t testing.TB, opts ...otelratelimit.Option) (func(outbound.Event), *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	observe, err := otelratelimit.NewOutboundObserver(mp, opts...)
	require.NoError(t, err)
	return observe, reader
}

// histogram is what a float64 histogram holds for one attribute set.
type histogram struct {
	count  uint64
	sum    float64
	counts []uint64 // by bucket
}

// histograms returns a float64 histogram's data points by encoded
// attribute set, having checked their bounds.
func histograms(t *testing.T, m metricdata.Metrics, bounds []float64) map[string]histogram {
	t.Helper()
	hist, ok := m.Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s is a %T, not a float64 histogram", m.Name, m.Data)
	out := map[string]histogram{}
	for _, dp := range hist.DataPoints {
		assert.Equal(t, bounds, dp.Bounds)
		out[encode(dp.Attributes)] = histogram{count: dp.Count, sum: dp.Sum, counts: dp.BucketCounts}
	}
	return out
}

// bucketsWith returns the bucket counts of a histogram with bounds that
// holds values.
func bucketsWith(bounds []float64, values ...float64) []uint64 {
	out := make([]uint64, len(bounds)+1)
	for _, v := range values {
		i := 0
		for i < len(bounds) && v > bounds[i] {
			i++
		}
		out[i]++
	}
	return out
}

func TestTheOutboundObserverRecordsEachKindOfEvent(t *testing.T) {
	observe, reader := newOutboundObserver(t, otelratelimit.WithLimiterName("partner"),
		otelratelimit.WithAttributes(attribute.String("region", "eu")))
	const secret = "token-7f3a" // a partition that must never become an attribute
	limited := fmt.Errorf("%w: 3s to wait", outbound.ErrLimited)
	for _, e := range []outbound.Event{
		{Kind: outbound.Waited, Partition: secret, Wait: 20 * time.Millisecond},
		{Kind: outbound.Waited, Partition: secret, Wait: 3 * time.Second},
		{Kind: outbound.Waited, Partition: secret, Wait: -time.Millisecond}, // a clock stepped back
		{Kind: outbound.Refused, Partition: secret, Err: limited},
		{Kind: outbound.Refused, Partition: secret, Err: fmt.Errorf("%w: past the deadline: %w", outbound.ErrLimited, context.DeadlineExceeded)},
		{Kind: outbound.Refused, Partition: secret, Wait: time.Second, Err: fmt.Errorf("outbound: waiting 2s: %w", context.Canceled)},
		{Kind: outbound.Refused, Partition: secret, Err: fmt.Errorf("outbound: the limiter: %w", ratelimit.ErrBackend)},
		{Kind: outbound.UpstreamLimited, Partition: secret, Status: http.StatusTooManyRequests},
		{Kind: outbound.UpstreamLimited, Partition: secret, Status: http.StatusTooManyRequests},
		{Kind: outbound.UpstreamLimited, Partition: secret, Status: http.StatusServiceUnavailable},
		{Kind: outbound.Paused, Partition: secret, Pause: time.Second},
		{Kind: outbound.Paused, Partition: secret, Pause: 15 * time.Minute},
		{Kind: outbound.Learned, Partition: secret, Policy: ratelimit.Policy{Limit: 5, Window: time.Second}},
		{Kind: outbound.Learned, Partition: secret}, // a limit forgotten
		{Kind: outbound.Retried, Partition: secret, Status: http.StatusTooManyRequests, Attempt: 2},
		{Kind: outbound.StoreFailed, Partition: secret, Err: fmt.Errorf("outbound: %w", ratelimit.ErrBackend)},
		{Kind: outbound.StoreFailed, Partition: secret, Err: errors.New("something else")},
		{Kind: outbound.SettleFailed, Partition: secret, Err: fmt.Errorf("outbound: Settle: %w", ratelimit.ErrInvalidConfig)},
		{Kind: outbound.EventKind(99), Partition: secret}, // unknown: ignored
	} {
		observe(e)
	}

	const base = "ratelimit.limiter=partner,region=eu"
	got := collect(t, reader)
	assert.Len(t, got, 9, "the unknown event records nothing")
	waits := got[otelratelimit.OutboundWaitName]
	assert.Equal(t, "s", waits.Unit)
	assert.Equal(t, map[string]histogram{
		base: {count: 3, sum: 3.02, counts: bucketsWith(otelratelimit.WaitBuckets, 0.02, 3, 0)},
	}, histograms(t, waits, otelratelimit.WaitBuckets))
	assert.Equal(t, map[string]int64{
		"ratelimit.limiter=partner,ratelimit.outbound.reason=limited,region=eu":                   2,
		"error.type=canceled,ratelimit.limiter=partner,ratelimit.outbound.reason=error,region=eu": 1,
		"error.type=backend,ratelimit.limiter=partner,ratelimit.outbound.reason=error,region=eu":  1,
	}, sums(t, got[otelratelimit.OutboundRefusalsName]))
	assert.Equal(t, map[string]int64{
		"http.response.status_code=429," + base: 2,
		"http.response.status_code=503," + base: 1,
	}, sums(t, got[otelratelimit.OutboundUpstreamLimitedName]))
	assert.Equal(t, map[string]int64{base: 2}, sums(t, got[otelratelimit.OutboundPausesName]))
	assert.Equal(t, map[string]histogram{
		base: {count: 2, sum: 901, counts: bucketsWith(otelratelimit.PauseBuckets, 1, 900)},
	}, histograms(t, got[otelratelimit.OutboundPauseName], otelratelimit.PauseBuckets))
	assert.Equal(t, map[string]int64{base: 2}, sums(t, got[otelratelimit.OutboundLearnedName]))
	assert.Equal(t, map[string]int64{"http.response.status_code=429," + base: 1}, sums(t, got[otelratelimit.OutboundRetriesName]))
	assert.Equal(t, map[string]int64{
		"error.type=backend," + base: 1,
		"error.type=_OTHER," + base:  1,
	}, sums(t, got[otelratelimit.OutboundStoreFailuresName]))
	assert.Equal(t, map[string]int64{"error.type=invalid_config," + base: 1}, sums(t, got[otelratelimit.OutboundSettleFailuresName]))

	for name, m := range got {
		for _, s := range attributeSets(t, m) {
			assert.NotContains(t, encode(s), secret, "%s carries the partition", name)
		}
	}
}

func TestTheOutboundInstrumentsUnitsAndKinds(t *testing.T) {
	observe, reader := newOutboundObserver(t)
	for k := outbound.Waited; k <= outbound.SettleFailed; k++ {
		observe(outbound.Event{Kind: k, Status: http.StatusTooManyRequests, Wait: time.Millisecond, Pause: time.Second})
	}
	got := collect(t, reader)
	for name, unit := range map[string]string{
		otelratelimit.OutboundRefusalsName:        "{call}",
		otelratelimit.OutboundUpstreamLimitedName: "{answer}",
		otelratelimit.OutboundPausesName:          "{pause}",
		otelratelimit.OutboundLearnedName:         "{limit}",
		otelratelimit.OutboundRetriesName:         "{retry}",
		otelratelimit.OutboundStoreFailuresName:   "{failure}",
		otelratelimit.OutboundSettleFailuresName:  "{failure}",
	} {
		assert.Equal(t, unit, got[name].Unit, name)
		sum, ok := got[name].Data.(metricdata.Sum[int64])
		require.True(t, ok, name)
		assert.True(t, sum.IsMonotonic, name)
	}
	assert.Equal(t, "s", got[otelratelimit.OutboundPauseName].Unit)
	// Without WithLimiterName, no ratelimit.limiter attribute.
	assert.Equal(t, map[string]int64{"": 1}, sums(t, got[otelratelimit.OutboundPausesName]))
	assert.Equal(t, map[string]int64{"ratelimit.outbound.reason=error": 1}, sums(t, got[otelratelimit.OutboundRefusalsName]),
		"a refusal without an error is no ErrLimited, and carries no error.type")
}

func TestNewOutboundObserverRejectsBadArguments(t *testing.T) {
	mp := sdkmetric.NewMeterProvider()
	_, err := otelratelimit.NewOutboundObserver(nil)
	assert.Error(t, err, "nil provider")
	for name, opt := range map[string]otelratelimit.Option{
		"nil option": nil,
		"empty name": otelratelimit.WithLimiterName(""),
		"reason key": otelratelimit.WithAttributes(otelratelimit.ReasonKey.String("x")),
		"status key": otelratelimit.WithAttributes(otelratelimit.StatusKey.Int(200)),
		"empty key":  otelratelimit.WithAttributes(attribute.String("", "x")),
	} {
		_, err := otelratelimit.NewOutboundObserver(mp, opt)
		assert.Error(t, err, name)
	}
}

func TestConcurrentOutboundEventsAreAllCounted(t *testing.T) {
	observe, reader := newOutboundObserver(t)
	const workers, each = 8, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				observe(outbound.Event{Kind: outbound.UpstreamLimited, Status: 429 + 74*((w+i)%2)}) // 429 or 503
			}
		})
	}
	wg.Wait()

	assert.Equal(t, map[string]int64{
		"http.response.status_code=429": workers * each / 2,
		"http.response.status_code=503": workers * each / 2,
	}, sums(t, collect(t, reader)[otelratelimit.OutboundUpstreamLimitedName]))
}

func TestTheOutboundObserverDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	observe, _ := newOutboundObserver(t, otelratelimit.WithLimiterName("partner"))
	events := []outbound.Event{
		{Kind: outbound.Waited, Partition: "p", Wait: time.Millisecond},
		{Kind: outbound.Refused, Partition: "p", Err: outbound.ErrLimited},
		{Kind: outbound.Refused, Partition: "p", Err: context.Canceled},
		{Kind: outbound.UpstreamLimited, Partition: "p", Status: http.StatusTooManyRequests},
		{Kind: outbound.Paused, Partition: "p", Pause: time.Second},
		{Kind: outbound.Learned, Partition: "p", Policy: ratelimit.Policy{Limit: 5, Window: time.Second}},
		{Kind: outbound.Retried, Partition: "p", Status: http.StatusTooManyRequests, Attempt: 2},
		{Kind: outbound.StoreFailed, Partition: "p", Err: ratelimit.ErrBackend},
	}
	for _, e := range events {
		observe(e) // builds the status's attribute set
	}
	for _, e := range events {
		assert.Equal(t, 0.0, testing.AllocsPerRun(1000, func() { observe(e) }), e.Kind.String())
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

func TestAnUpstreamsTransportReportsA429ItsPauseTheRetryAndARefusal(t *testing.T) {
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

	observe, reader := newOutboundObserver(t, otelratelimit.WithLimiterName("partner"))
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

	const base = "ratelimit.limiter=partner"
	got := collect(t, reader)
	assert.Equal(t, map[string]int64{"http.response.status_code=429," + base: 1}, sums(t, got[otelratelimit.OutboundUpstreamLimitedName]))
	assert.Equal(t, map[string]int64{base: 1}, sums(t, got[otelratelimit.OutboundPausesName]))
	assert.Equal(t, map[string]histogram{
		base: {count: 1, sum: maxPause.Seconds(), counts: bucketsWith(otelratelimit.PauseBuckets, maxPause.Seconds())},
	}, histograms(t, got[otelratelimit.OutboundPauseName], otelratelimit.PauseBuckets))
	assert.Equal(t, map[string]int64{"http.response.status_code=429," + base: 1}, sums(t, got[otelratelimit.OutboundRetriesName]))
	assert.Equal(t, map[string]int64{base + ",ratelimit.outbound.reason=limited": 1}, sums(t, got[otelratelimit.OutboundRefusalsName]))
	waits := histograms(t, got[otelratelimit.OutboundWaitName], otelratelimit.WaitBuckets)
	require.Contains(t, waits, base)
	assert.Equal(t, uint64(1), waits[base].count, "only the retry waited")
	assert.GreaterOrEqual(t, waits[base].sum, maxPause.Seconds(), "the retry waited out the pause")
	assert.NotContains(t, got, otelratelimit.OutboundLearnedName)
	assert.NotContains(t, got, otelratelimit.OutboundStoreFailuresName)
}

// An Upstream that fails fast reports a call refused for its limit, and a
// 429 that pauses its partition.
func ExampleNewOutboundObserver() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()

	observe, err := otelratelimit.NewOutboundObserver(mp, otelratelimit.WithLimiterName("partner"))
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

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	var lines []string
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
			for _, dp := range sum.DataPoints {
				lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Value))
			}
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// true
	// ratelimit.outbound.pauses{ratelimit.limiter=partner} 1
	// ratelimit.outbound.refusals{ratelimit.limiter=partner,ratelimit.outbound.reason=limited} 1
	// ratelimit.outbound.upstream_limited{http.response.status_code=429,ratelimit.limiter=partner} 1
}

func BenchmarkOutboundObserver(b *testing.B) {
	observe, _ := newOutboundObserver(b, otelratelimit.WithLimiterName("partner"))
	e := outbound.Event{Kind: outbound.UpstreamLimited, Partition: "p", Status: http.StatusTooManyRequests}
	b.ReportAllocs()
	for b.Loop() {
		observe(e)
	}
}

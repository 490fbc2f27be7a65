package main

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// simulateAll runs the example's traffic and returns every outcome, in the
// order token bucket, GCRA, fixed window, sliding log, sliding counter,
// calendar window.
func simulateAll(t *testing.T) []Outcome {
	t.Helper()
	outs, err := Simulate(Traffic())
	require.NoError(t, err)
	names := []string{nameTokenBucket, nameGCRA, nameFixedWindow, nameSlidingLog, nameCounter, nameCalendar}
	require.Len(t, outs, len(names))
	for i, o := range outs {
		require.Equal(t, names[i], o.Name)
		require.Len(t, o.Decisions, len(Traffic()), o.Name)
	}
	return outs
}

// simulate runs the example's traffic and returns the token bucket, GCRA and
// fixed window outcomes.
func simulate(t *testing.T) (tb, gcra, fw Outcome) {
	t.Helper()
	outs := simulateAll(t)
	return outs[0], outs[1], outs[2]
}

func decisions(o Outcome) []bool {
	ds := make([]bool, len(o.Decisions))
	for i, d := range o.Decisions {
		ds[i] = d.Allowed
	}
	return ds
}

func TestTokenBucketAndGCRADecideAlike(t *testing.T) {
	tb, gcra, _ := simulate(t)
	assert.Equal(t, decisions(tb), decisions(gcra))
}

// spans are the lengths over which the busiest stretch is checked.
var spans = []time.Duration{
	50 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second,
	5 * time.Second, 10 * time.Second, 20 * time.Second, horizon + time.Second,
}

func TestBucketsNeverExceedCapacityPlusRefill(t *testing.T) {
	tb, gcra, _ := simulate(t)
	for _, o := range []Outcome{tb, gcra} {
		for _, span := range spans {
			most := limit + int(math.Floor(rate*span.Seconds()))
			got, from := Busiest(o.Allowed(), span)
			assert.LessOrEqual(t, got, most, "%s: %d allowed in %v from %v", o.Name, got, span, from)
		}
	}
}

func TestFixedWindowLetsNearlyTwiceTheLimitThroughAtTheBoundary(t *testing.T) {
	tb, gcra, fw := simulate(t)

	// The lone request at opener opened the window that ends at boundary.
	assert.Contains(t, fw.Windows(period), Window{Start: opener, End: boundary})

	// Of the 10 requests just before the boundary and the 10 just after, the
	// fixed window lets through all but one (the opener took that one), the
	// buckets only the 10 they had saved up.
	from, to := boundary-limit*burstGap, boundary+limit*burstGap
	got, of := fw.Between(from, to)
	assert.Equal(t, 2*limit, of)
	assert.Equal(t, 2*limit-1, got)
	for _, o := range []Outcome{tb, gcra} {
		got, _ := o.Between(from, to)
		assert.Equal(t, limit, got, o.Name)
	}

	// So the fixed window's busiest second exceeds its limit, and is there,
	// but no span up to a window long ever holds more than twice the limit.
	// The buckets' busiest second holds at most capacity + 1 s of refill.
	most, at := Busiest(fw.Allowed(), time.Second)
	assert.Greater(t, most, limit)
	assert.LessOrEqual(t, most, 2*limit)
	assert.Equal(t, from, at)
	for _, span := range spans {
		if span > period {
			continue
		}
		got, from := Busiest(fw.Allowed(), span)
		assert.LessOrEqual(t, got, 2*limit, "%d allowed in %v from %v", got, span, from)
	}
	for _, o := range []Outcome{tb, gcra} {
		most, _ := Busiest(o.Allowed(), time.Second)
		assert.LessOrEqual(t, most, limit+int(rate), o.Name)
	}
}

func TestFixedWindowOpensAtFirstRequest(t *testing.T) {
	_, _, fw := simulate(t)
	s := time.Second
	want := []Window{
		{0, 10 * s},                              // the first request
		{10 * s, 20 * s},                         // the stream, right at the end of the first window
		{opener, boundary},                       // the lone request
		{boundary, boundary + period},            // the burst after the boundary
		{bigBurst, bigBurst + period},            // the big burst, not at 41 s
		{bigBurst + period, bigBurst + 2*period}, // the stream at the rate
	}
	assert.Equal(t, want, fw.Windows(period))
	for _, d := range fw.Decisions {
		if d.Allowed {
			assert.LessOrEqual(t, d.ResetAfter, period, "at %v", d.At)
		}
	}
}

func TestSlidingLogNeverAllowsMoreThanTheLimitInAnyWindow(t *testing.T) {
	outs := simulateAll(t)
	log, fw := outs[3], outs[2]
	most, _ := Busiest(log.Allowed(), period)
	assert.Equal(t, limit, most, "the log fills its window, and never more")
	for _, span := range spans {
		if span > period {
			continue
		}
		got, from := Busiest(log.Allowed(), span)
		assert.LessOrEqual(t, got, limit, "%d allowed in %v from %v", got, span, from)
	}
	// Around the boundary it lets through what the fixed window's previous
	// window had left, not a second limit.
	got, _ := log.Between(boundary-limit*burstGap, boundary+limit*burstGap)
	fwGot, _ := fw.Between(boundary-limit*burstGap, boundary+limit*burstGap)
	assert.Equal(t, limit, got)
	assert.Greater(t, fwGot, got)
}

func TestSlidingCounterStaysWithinItsBound(t *testing.T) {
	counter := simulateAll(t)[4]
	// It can let through more than the limit in a span of a window only
	// when the previous window's units came late in it, and never twice
	// the limit; on this traffic it holds to the limit.
	for _, span := range spans {
		if span > period {
			continue
		}
		got, from := Busiest(counter.Allowed(), span)
		assert.Less(t, got, 2*limit, "%d allowed in %v from %v", got, span, from)
	}
	most, _ := Busiest(counter.Allowed(), period)
	assert.Equal(t, limit, most)
}

func TestCalendarWindowResetsAtTheWallClocksMinute(t *testing.T) {
	cal := simulateAll(t)[5]
	// The simulation starts 29 s into a minute: the first minute ends at
	// 31 s whatever time the first request came, and the next one opens
	// there.
	assert.Equal(t, []Window{{-29 * time.Second, boundary}, {boundary, boundary + time.Minute}}, cal.Windows(time.Minute))
	before, _ := cal.Between(0, boundary)
	after, _ := cal.Between(boundary, horizon+time.Second)
	assert.Equal(t, quota, before, "the quota runs out before the minute ends")
	assert.Equal(t, quota, after, "and is whole again at the boundary")
	for _, d := range cal.Decisions {
		if !d.Allowed {
			continue
		}
		want := boundary - d.At
		if d.At >= boundary {
			want += time.Minute
		}
		assert.Equal(t, want, d.ResetAfter, "at %v", d.At)
	}
}

func TestTotals(t *testing.T) {
	outs := simulateAll(t)
	tb, fw := outs[0], outs[2]
	for _, o := range outs {
		ok, no := o.Counts()
		assert.Equal(t, len(Traffic()), ok+no, o.Name)
		assert.Len(t, o.Allowed(), ok, o.Name)
	}
	tbOK, _ := tb.Counts()
	fwOK, _ := fw.Counts()
	assert.Greater(t, tbOK, fwOK, "the bucket refills continuously; the window idles until its end")
}

func TestSimulateRejectsUnorderedTraffic(t *testing.T) {
	_, err := Simulate([]time.Duration{time.Second, 0})
	require.Error(t, err)
}

func TestBusiest(t *testing.T) {
	ms := time.Millisecond
	ts := []time.Duration{0, 100 * ms, 900 * ms, 1000 * ms, 1050 * ms, 3000 * ms}
	for _, c := range []struct {
		span time.Duration
		want int
		from time.Duration
	}{
		{ms, 1, 0},
		{200 * ms, 3, 900 * ms},        // 0.9, 1.0, 1.05
		{time.Second, 4, 100 * ms},     // 0.1 up to 1.05; [0, 1 s) leaves 1.0 out
		{3 * time.Second, 5, 0},        // the span is half-open: 3.0 is out
		{3000*ms + 1, 6, 0},            // and now in
		{10 * time.Second, len(ts), 0}, // everything
	} {
		t.Run(fmt.Sprint(c.span), func(t *testing.T) {
			got, from := Busiest(ts, c.span)
			assert.Equal(t, c.want, got)
			assert.Equal(t, c.from, from)
		})
	}
	got, _ := Busiest(nil, time.Second)
	assert.Equal(t, 0, got)
}

package outbound

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// answer returns an Answer of status whose fields are kv, pairs of a name
// and a value, read at now.
func answer(status int, now time.Time, kv ...string) Answer {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return Answer{Status: status, Header: h, Now: now}
}

// readDefault returns what the default parsers read in a, merged as an
// Upstream merges them.
func readDefault(a Answer) Lesson {
	var l Lesson
	for _, p := range DefaultParsers() {
		l = l.merge(p(a))
	}
	return l
}

func TestTheDefaultParsersReadWhatUpstreamsSend(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	sec := time.Second
	date := now.Add(-2 * sec).Format(http.TimeFormat) // the upstream's clock, 2 s behind ours
	for _, tc := range []struct {
		name string
		a    Answer
		want Lesson
	}{
		{"a 200 with nothing", answer(200, now), Lesson{}},
		{"a 429 with nothing", answer(429, now), Lesson{Limited: true}},
		{"a 429 with Retry-After seconds", answer(429, now, "Retry-After", "7"), Lesson{Limited: true, Pause: 7 * sec}},
		{"a 503 with Retry-After", answer(503, now, "Retry-After", "3"), Lesson{Limited: true, Pause: 3 * sec}},
		{"a 503 without Retry-After is no limit", answer(503, now), Lesson{}},
		{"a Retry-After on a redirect is no limit", answer(301, now, "Retry-After", "3"), Lesson{}},
		{"a Retry-After date, read against the answer's Date", answer(429, now, "Date", date, "Retry-After", now.Add(8*sec).Format(http.TimeFormat)), Lesson{Limited: true, Pause: 10 * sec}},
		{"a Retry-After date without a Date, read against ours", answer(429, now, "Retry-After", now.Add(8*sec).Format(http.TimeFormat)), Lesson{Limited: true, Pause: 8 * sec}},
		{"a Retry-After date in the past", answer(429, now, "Retry-After", now.Add(-time.Hour).Format(http.TimeFormat)), Lesson{Limited: true}},
		{"IETF: r=0 with a t pauses", answer(200, now, "RateLimit", `"default";r=0;t=2`), Lesson{Pause: 2 * sec}},
		{"IETF: r>0 does not", answer(200, now, "RateLimit", `"default";r=3;t=2`), Lesson{}},
		{"IETF: a policy", answer(200, now, "RateLimit-Policy", `"default";q=5;w=1`), Lesson{Policy: ratelimit.Policy{Limit: 5, Window: sec}}},
		{"IETF: the tightest of several policies", answer(200, now, "RateLimit-Policy", `"burst";q=10;w=1, "minute";q=120;w=60`), Lesson{Policy: ratelimit.Policy{Limit: 10, Window: 5 * sec}}},
		{"IETF: policies in other units say nothing of calls", answer(200, now, "RateLimit-Policy", `"tokens";q=5;w=1;qu="tokens", "c";q=2;qu="concurrent-requests"`), Lesson{}},
		{"IETF: a policy of q=0 is skipped", answer(200, now, "RateLimit-Policy", `"default";q=0;w=1`), Lesson{}},
		{"vendor: remaining 0 and a reset in seconds", answer(200, now, "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "12"), Lesson{Pause: 12 * sec}},
		{"vendor: a reset as a Unix time, read against Date", answer(200, now, "Date", date, "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1796558430"), Lesson{Pause: time.Unix(1796558430, 0).Sub(now.Add(-2 * sec))}},
		{"vendor: remaining > 0", answer(200, now, "X-RateLimit-Remaining", "4", "X-RateLimit-Reset", "12"), Lesson{}},
		{"vendor: a spent token quota, reset as a duration", answer(200, now, "X-RateLimit-Remaining-Requests", "9", "X-RateLimit-Reset-Requests", "100ms", "X-RateLimit-Remaining-Tokens", "0", "X-RateLimit-Reset-Tokens", "6m0s"), Lesson{Pause: 6 * time.Minute}},
		{"legacy fields", answer(200, now, "RateLimit-Remaining", "0", "RateLimit-Reset", "3"), Lesson{Pause: 3 * sec}},
		{"contradictions: the longest pause and the tightest policy", answer(429, now, "Retry-After", "2", "RateLimit", `"a";r=0;t=5`, "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1", "RateLimit-Policy", `"a";q=100;w=1, "b";q=4;w=1`), Lesson{Limited: true, Pause: 5 * sec, Policy: ratelimit.Policy{Limit: 4, Window: sec}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, readDefault(tc.a))
		})
	}
}

func TestBadFieldsFromAnUpstreamTeachNothingOrAreBounded(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name string
		a    Answer
		want Lesson
	}{
		{"a malformed RateLimit", answer(200, now, "RateLimit", `"a";r=0;t=5,,`), Lesson{}},
		{"a malformed RateLimit-Policy", answer(200, now, "RateLimit-Policy", `"a";q=5;w=1 junk`), Lesson{}},
		{"a negative r", answer(200, now, "RateLimit", `"a";r=-1;t=5`), Lesson{}},
		{"a negative t", answer(200, now, "RateLimit", `"a";r=0;t=-5`), Lesson{}},
		{"a negative q", answer(200, now, "RateLimit-Policy", `"a";q=-5;w=1`), Lesson{}},
		{"a w of 0", answer(200, now, "RateLimit-Policy", `"a";q=5;w=0`), Lesson{}},
		{"a huge q", answer(200, now, "RateLimit-Policy", `"a";q=999999999999999;w=1`), Lesson{Policy: ratelimit.Policy{Limit: 999999999999999, Window: time.Second}}},
		{"a huge w", answer(200, now, "RateLimit-Policy", `"a";q=5;w=999999999999999`), Lesson{Policy: ratelimit.Policy{Limit: 5, Window: maxPolicyWindow}}},
		{"a number too long for a structured field", answer(200, now, "RateLimit", `"a";r=0;t=9999999999999999`), Lesson{}},
		{"a Retry-After of junk", answer(429, now, "Retry-After", "soon"), Lesson{Limited: true}},
		{"a negative Retry-After", answer(429, now, "Retry-After", "-5"), Lesson{Limited: true}},
		{"a vendor reset of junk", answer(200, now, "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "NaN"), Lesson{}},
		{"a vendor remaining of junk", answer(200, now, "X-RateLimit-Remaining", "none", "X-RateLimit-Reset", "5"), Lesson{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, readDefault(tc.a))
		})
	}
}

func TestObserveBoundsEveryPauseAndNeverLiftsTheConfiguredLimit(t *testing.T) {
	ft := newFakeTime()
	store := NewMemoryStore(ft.clock)
	u, ev := newTestUpstream(t, ft, newLearningGCRA(t, ft, 10, time.Second), Config{Store: store, MaxWait: -1})
	ctx := context.Background()
	p, err := u.Admit(ctx, "api", 1)
	require.NoError(t, err)

	year := answer(429, ft.clock.Now(), "Retry-After", "31536000", "RateLimit-Policy", `"a";q=1000000;w=1`)
	l := u.Observe(ctx, p, year)
	assert.Equal(t, DefaultMaxPause, l.Pause, "a year's Retry-After pauses for MaxPause")
	st, err := store.Load(ctx, "api")
	require.NoError(t, err)
	assert.Equal(t, DefaultMaxPause, st.Pause)
	assert.Len(t, ev.of(UpstreamLimited), 1)
	require.Len(t, ev.of(Paused), 1)
	assert.Equal(t, DefaultMaxPause, ev.of(Paused)[0].Pause)

	ft.clock.Advance(DefaultMaxPause)
	assert.Equal(t, 10, burst(t, u, "api"), "a policy larger than the configured one lifts nothing")
}

func TestObserveStoresAStatedLimitOnlyWhenItChangesOrHalfItsKeepingHasPassed(t *testing.T) {
	ft := newFakeTime()
	store := &countingStore{Store: NewMemoryStore(ft.clock)}
	u, ev := newTestUpstream(t, ft, newLearningGCRA(t, ft, 10, time.Second), Config{Store: store, Forget: time.Minute})
	ctx := context.Background()
	five := answer(200, ft.clock.Now(), "RateLimit-Policy", `"a";q=5;w=1`)
	for range 3 {
		p, err := u.Admit(ctx, "api", 1)
		require.NoError(t, err)
		u.Observe(ctx, p, five)
	}
	assert.Equal(t, 1, store.learns, "stated three times, stored once")
	require.Len(t, ev.of(Learned), 1)
	assert.Equal(t, ratelimit.Policy{Limit: 5, Window: time.Second}, ev.of(Learned)[0].Policy)

	ft.clock.Advance(31 * time.Second)
	p, err := u.Admit(ctx, "api", 1)
	require.NoError(t, err)
	u.Observe(ctx, p, five)
	assert.Equal(t, 2, store.learns, "kept again past half a minute")
	assert.Len(t, ev.of(Learned), 1, "not a change")

	p, err = u.Admit(ctx, "api", 1)
	require.NoError(t, err)
	u.Observe(ctx, p, answer(200, ft.clock.Now(), "RateLimit-Policy", `"a";q=10;w=1`))
	assert.Equal(t, 3, store.learns, "the upstream says the limit is back")
	assert.Len(t, ev.of(Learned), 2)
}

// countingStore counts a Store's Learn calls.
type countingStore struct {
	Store
	learns int
}

func (s *countingStore) Learn(ctx context.Context, partition string, p ratelimit.Policy, keep time.Duration) (bool, error) {
	s.learns++
	return s.Store.Learn(ctx, partition, p, keep)
}

func TestACustomVendorParserReadsItsFields(t *testing.T) {
	p := VendorHeaders("x-quota-left", "x-quota-reset")
	assert.Equal(t, Lesson{Pause: 4 * time.Second}, p(answer(200, time.Now(), "X-Quota-Left", "0", "X-Quota-Reset", "4")))
	assert.Equal(t, Lesson{}, VendorHeaders("", "")(answer(200, time.Now(), "X-Quota-Left", "0")))
}

func TestIgnorePoliciesLearnsPausesOnly(t *testing.T) {
	ft := newFakeTime()
	plain, err := ratelimit.NewGCRA(10, time.Second, ratelimit.WithClock(ft.clock))
	require.NoError(t, err)
	u, _ := newTestUpstream(t, ft, plain, Config{IgnorePolicies: true})
	p, err := u.Admit(context.Background(), "api", 1)
	require.NoError(t, err)
	l := u.Observe(context.Background(), p, answer(200, ft.clock.Now(), "RateLimit", `"a";r=0;t=1`, "RateLimit-Policy", `"a";q=5;w=1`))
	assert.Equal(t, Lesson{Pause: time.Second}, l)
}

func TestAParserForTokensLearnsOnlyLimitsStatedInTokens(t *testing.T) {
	a := answer(200, time.Now(), "RateLimit-Policy", `"rpm";q=100;w=60, "tpm";q=90000;w=60;qu="tokens"`)
	assert.Equal(t, Lesson{Policy: ratelimit.Policy{Limit: 90000, Window: time.Minute}}, IETFFieldsIn("tokens")(a))
	assert.Equal(t, Lesson{Policy: ratelimit.Policy{Limit: 100, Window: time.Minute}}, IETFFieldsIn("requests")(a))
	assert.Equal(t, IETFFields(a), IETFFieldsIn("")(a))
}

func TestARetryAfterOfZeroOnA503IsNoLimitAndANegativePauseIsNone(t *testing.T) {
	assert.Equal(t, Lesson{}, RetryAfter(answer(503, time.Now(), "Retry-After", "0")))
	assert.Equal(t, Lesson{}, Lesson{}.merge(Lesson{Pause: -time.Second}))
}

func TestALimitStatedAtTheLimitersOwnIsKeptButNotReportedAsLearned(t *testing.T) {
	ft := newFakeTime()
	store := NewMemoryStore(ft.clock)
	u, ev := newTestUpstream(t, ft, newLearningGCRA(t, ft, 10, time.Second), Config{Store: store})
	ctx := context.Background()
	p, err := u.Admit(ctx, "api", 1)
	require.NoError(t, err)
	u.Observe(ctx, p, answer(200, ft.clock.Now(), "RateLimit-Policy", `"a";q=10;w=1`))
	assert.Empty(t, ev.of(Learned), "the limiter applies what it did")
	st, err := store.Load(ctx, "api")
	require.NoError(t, err)
	assert.Equal(t, ratelimit.Policy{Limit: 10, Window: time.Second}, st.Policy)
}

package ratefields_test

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/internal/ratefields"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// randomPolicies returns 1 to 4 policies of distinct random names of
// printable ASCII, quotes and backslashes likely, limits of up to 15
// digits (the most a structured-field Integer holds), windows from none
// to a year, some of them limits on calls in flight or per call.
func randomPolicies(rng *rand.Rand) []ratelimit.NamedPolicy {
	n := 1 + rng.IntN(4)
	ps := make([]ratelimit.NamedPolicy, 0, n)
	seen := map[string]bool{}
	for len(ps) < n {
		name := make([]byte, 1+rng.IntN(12))
		for i := range name {
			switch rng.IntN(6) {
			case 0:
				name[i] = '"'
			case 1:
				name[i] = '\\'
			default:
				name[i] = byte(0x20 + rng.IntN(0x7f-0x20))
			}
		}
		if seen[string(name)] {
			continue
		}
		seen[string(name)] = true
		limits := []int{0, 1, rng.IntN(1000), rng.IntN(1e9), 999999999999999}
		windows := []time.Duration{0, time.Nanosecond, time.Second, time.Duration(rng.Int64N(int64(365 * 24 * time.Hour)))}
		ps = append(ps, ratelimit.NamedPolicy{
			Name:     string(name),
			Policy:   ratelimit.Policy{Limit: limits[rng.IntN(len(limits))], Window: windows[rng.IntN(len(windows))]},
			InFlight: rng.IntN(5) == 0,
			PerCall:  rng.IntN(5) == 0,
		})
	}
	return ps
}

// policyItems returns what RateLimit-Policy says of policies, sent with
// quota unit unit: the items ParsePolicies should read.
func policyItems(policies []ratelimit.NamedPolicy, unit string) []ratefields.PolicyItem {
	var want []ratefields.PolicyItem
	for _, p := range policies {
		it := ratefields.PolicyItem{Name: p.Name, Q: int64(p.Limit), QU: ratefields.UnitOf(p, unit)}
		if p.InFlight {
			it.QU = "concurrent-requests"
		} else {
			it.W = ratefields.CeilSeconds(p.Window)
		}
		want = append(want, it)
	}
	return want
}

func TestWhatNewPoliciesWritesIsReadBackToTheSameNamesAndNumbers(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 1))
	units := []string{"", "tokens", "content-bytes"}
	for range 2000 {
		policies := randomPolicies(rng)
		unit := units[rng.IntN(len(units))]
		ps := ratefields.NewPolicies(policies, unit)
		want := policyItems(policies, unit)
		require.Equal(t, want, ratefields.ParsePolicies([]string{ps[0].List}), ps[0].List)
		// Each Item alone, and every Item on a field line of its own.
		lines := make([]string, len(ps))
		for i, p := range ps {
			assert.Equal(t, want[i:i+1], ratefields.ParsePolicies([]string{p.Item}), p.Item)
			lines[i] = p.Item
		}
		assert.Equal(t, want, ratefields.ParsePolicies(lines), lines)
	}
}

func TestWhatAppendValuesWritesIsReadBackToTheSameNamesAndNumbers(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 2))
	secret := []byte("0123456789abcdef")
	for range 2000 {
		policies := randomPolicies(rng)
		ps := ratefields.NewPolicies(policies, "")
		bound := rng.IntN(len(ps))
		d := &ratelimit.Decision{
			Result:      ratelimit.Result{Remaining: rng.IntN(1e6) - 10, RetryAfter: time.Duration(rng.Int64N(int64(time.Hour)))},
			Policies:    policies,
			PolicyIndex: bound,
		}
		if rng.IntN(2) == 0 {
			d.Parts = make([]ratelimit.Result, len(ps))
			for i := range d.Parts {
				d.Parts[i].Remaining = rng.IntN(1e6) - 10
			}
			d.Remaining = d.Parts[bound].Remaining
		}
		deny := rng.IntN(3) == 0
		pk := ""
		if rng.IntN(2) == 0 {
			pk = ratefields.PartitionKey(secret, "alice")
		}
		var buf [ratefields.BufSize]byte
		b, _, rst := ratefields.AppendValues(buf[:0], ps, bound, d, deny, true, pk)
		rateLimit := string(b[rst:])

		// The hand-made Decision does not tell each policy's effective
		// window: t is there on a denial only.
		want := []ratefields.LimitItem{{Name: policies[bound].Name, R: int64(max(d.Remaining, 0)), T: -1}}
		if deny {
			want[0].T = max(ratefields.CeilSeconds(d.RetryAfter), 1)
		} else if d.Parts != nil {
			for i, p := range policies {
				if i != bound {
					want = append(want, ratefields.LimitItem{Name: p.Name, R: int64(max(d.Parts[i].Remaining, 0)), T: -1})
				}
			}
		}
		assert.Equal(t, want, ratefields.ParseLimits([]string{rateLimit}), rateLimit)

		// One item with any r and t.
		r, tw := rng.Int64N(1e15), rng.Int64N(1e15)-1
		item := string(ratefields.AppendItem(nil, ps[bound].BeforeR, r, tw, pk))
		assert.Equal(t, []ratefields.LimitItem{{Name: policies[bound].Name, R: r, T: tw}}, ratefields.ParseLimits([]string{item}), item)
	}
}

func TestWhatStackedHttplimitMiddlewaresSendIsReadBack(t *testing.T) {
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	perSecond, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 10, ratelimit.WithClock(clock))
	require.NoError(t, err)
	perHour, err := ratelimit.NewTokenBucket(ratelimit.PerHour(1000), 1000, ratelimit.WithClock(clock))
	require.NoError(t, err)
	composite, err := ratelimit.NewComposite(ratelimit.Part{Name: "per-second", Limiter: perSecond}, ratelimit.Part{Name: "per-hour", Limiter: perHour})
	require.NoError(t, err)
	tenant, err := ratelimit.NewTokenBucket(ratelimit.PerMinute(5), 5, ratelimit.WithClock(clock))
	require.NoError(t, err)

	key := httplimit.KeyByHeader("X-Api-Key")
	inner, err := httplimit.NewMiddleware(composite, key, httplimit.WithHeaderStyle(httplimit.IETFHeaders), httplimit.WithPartitionKey([]byte("0123456789abcdef")))
	require.NoError(t, err)
	outer, err := httplimit.NewMiddleware(tenant, key, httplimit.WithPolicyName(`tenant "a\b"`), httplimit.WithQuotaUnit("tokens"))
	require.NoError(t, err)
	h := outer.Handler(inner.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))

	for i := 1; i <= 6; i++ {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-Api-Key", "alice")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		policies := ratefields.ParsePolicies(w.Header().Values("RateLimit-Policy"))
		limits := ratefields.ParseLimits(w.Header().Values("RateLimit"))
		if i == 6 { // the tenant's sixth request in a minute: denied
			require.Equal(t, http.StatusTooManyRequests, w.Code)
			assert.Equal(t, []ratefields.PolicyItem{{Name: `tenant "a\b"`, Q: 5, W: 60, QU: "tokens"}}, policies)
			require.Len(t, limits, 1)
			assert.Equal(t, ratefields.LimitItem{Name: `tenant "a\b"`, R: 0, T: 12}, limits[0])
			wait, ok := ratefields.ParseRetryAfter(w.Header().Get("Retry-After"), clock.Now())
			assert.True(t, ok)
			assert.Equal(t, 12*time.Second, wait)
			continue
		}
		require.Equal(t, http.StatusOK, w.Code)
		// The inner Middleware's policies first, then the outer's.
		assert.Equal(t, []ratefields.PolicyItem{
			{Name: "per-second", Q: 10, W: 1},
			{Name: "per-hour", Q: 1000, W: 3600},
			{Name: `tenant "a\b"`, Q: 5, W: 60, QU: "tokens"},
		}, policies, "request %d", i)
		assert.ElementsMatch(t, []ratefields.LimitItem{
			{Name: "per-second", R: int64(10 - i), T: 1},
			{Name: "per-hour", R: int64(1000 - i), T: 4},
			{Name: `tenant "a\b"`, R: int64(5 - i), T: 12},
		}, limits, "request %d", i)
	}
}

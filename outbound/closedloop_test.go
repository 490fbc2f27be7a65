package outbound

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/internal/ratefields"
	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// upstreamStyle is what an upstream under test tells its clients.
type upstreamStyle int

const (
	tellsIETF       upstreamStyle = iota // httplimit's own fields
	tellsVendor                          // X-RateLimit-Remaining and X-RateLimit-Reset only
	tellsRetryAfter                      // a 429 with Retry-After only
)

// liveUpstream is an upstream whose limit, per second, changes while it
// runs: an exact GCRA with a burst of one second's limit.
type liveUpstream struct {
	mu    sync.Mutex
	limit int
	gcra  *ratelimit.GCRA
}

// setLimit makes the upstream allow limit calls a second from now on.
func (u *liveUpstream) setLimit(limit int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.limit = limit
}

// policy is the upstream's PolicyFunc.
func (u *liveUpstream) policy(context.Context, string) (ratelimit.Policy, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return ratelimit.Policy{Limit: u.limit, Window: time.Second}, nil
}

// newLiveUpstream starts an upstream of limit per second on clock (nil:
// the system's) that tells its clients what style says.
func newLiveUpstream(t *testing.T, clock ratelimit.Clock, limit int, style upstreamStyle) (*liveUpstream, *httptest.Server) {
	t.Helper()
	u := &liveUpstream{limit: limit}
	opts := []ratelimit.Option{ratelimit.WithPolicyFunc(u.policy)}
	mwOpts := []httplimit.Option{}
	if clock != nil {
		opts = append(opts, ratelimit.WithClock(clock))
		mwOpts = append(mwOpts, httplimit.WithClock(clock))
	}
	g, err := ratelimit.NewGCRA(limit, time.Second, opts...)
	require.NoError(t, err)
	u.gcra = g
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	var h http.Handler
	switch style {
	case tellsIETF:
		m, err := httplimit.NewMiddleware(g, func(*http.Request) (string, error) { return "all", nil }, mwOpts...)
		require.NoError(t, err)
		h = m.Handler(ok)
	default:
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res, err := g.Allow(r.Context(), "all", 1)
			if err != nil {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			if style == tellsVendor {
				w.Header().Set("X-RateLimit-Remaining", strconv.Itoa(res.Remaining))
				w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(ratefields.CeilSeconds(max(res.ResetAfter, res.RetryAfter)), 10))
			}
			if !res.Allowed {
				if style == tellsRetryAfter {
					w.Header().Set("Retry-After", strconv.FormatInt(max(ratefields.CeilSeconds(res.RetryAfter), 1), 10))
				}
				w.WriteHeader(http.StatusTooManyRequests)
			}
		})
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return u, srv
}

// tally counts the answers of a run.
type tally struct{ answers, limited int }

func TestThreeReplicasLearnTheUpstreamsLimitFromOneAnotherOnFakeTime(t *testing.T) {
	for _, tc := range []struct {
		name  string
		style upstreamStyle
		// the least answers, of an allowance of 150, and the most 429s
		answers, limited int
	}{
		{"ietf", tellsIETF, 143, 0},
		{"vendor", tellsVendor, 143, 0},
		{"retry-after", tellsRetryAfter, 143, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			clock := ratelimittest.NewClock(start)
			_, rdb, advance := redistest.Miniredis(t, start)
			up, srv := newLiveUpstream(t, clock, 10, tc.style)
			store := mustRedisStore(t, rdb, "")

			var replicas []*http.Client
			for range 3 {
				lim, err := ratelimit.NewRedisGCRA(rdb, 10, time.Second, ratelimit.WithPolicyFunc(LearnedPolicy))
				require.NoError(t, err)
				u, err := New(lim, Config{Store: store, NoJitter: true, Clock: clock})
				require.NoError(t, err)
				u.sleep = func(ctx context.Context, d time.Duration) error {
					clock.Advance(d)
					advance(d)
					return nil
				}
				replicas = append(replicas, &http.Client{Transport: &Transport{Upstream: u}})
			}

			var got tally
			for clock.Now().Sub(start) < 20*time.Second {
				if clock.Now().Sub(start) >= 10*time.Second {
					up.setLimit(5)
				}
				for _, c := range replicas {
					resp, err := c.Get(srv.URL)
					require.NoError(t, err)
					resp.Body.Close()
					switch resp.StatusCode {
					case http.StatusOK:
						got.answers++
					case http.StatusTooManyRequests:
						got.limited++
					default:
						t.Fatalf("status %d", resp.StatusCode)
					}
				}
			}
			t.Logf("%s: %d answers, %d 429s, of an allowance of 150", tc.name, got.answers, got.limited)
			assert.GreaterOrEqual(t, got.answers, tc.answers)
			assert.LessOrEqual(t, got.limited, tc.limited)
		})
	}
}

func TestThreeReplicasOnARealServerKeepWithinALimitThatDropsWhileTheyRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 3 s of real time")
	}
	rdb := realRedis(t)
	if rdb == nil {
		t.Skip("redis-server is not installed")
	}
	for _, tc := range []struct {
		name          string
		style         upstreamStyle
		least, most   int // answers
		limitedAtMost int
	}{
		// 20 at once, 20/s for 1.5 s, then 10/s for 1.5 s: 65 at most.
		// An upstream that states its limit is refused by calls that
		// cross its drop in flight only. One that does not is found out
		// by refusals: each pause after the drop ends with the configured
		// burst of 20 against its 10, so up to the 12 workers' calls in
		// flight are refused, for each of the (at most 2) pauses of a
		// second after the drop.
		{"ietf", tellsIETF, 35, 66, 3},
		{"vendor", tellsVendor, 35, 66, 24},
		{"retry-after", tellsRetryAfter, 35, 66, 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up, srv := newLiveUpstream(t, nil, 20, tc.style)
			prefix := "test:closedloop:" + tc.name + ":"
			store := mustRedisStore(t, rdb, prefix)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			drop := time.AfterFunc(1500*time.Millisecond, func() { up.setLimit(10) })
			defer drop.Stop()

			var mu sync.Mutex
			var got tally
			var wg sync.WaitGroup
			for range 3 {
				lim, err := ratelimit.NewRedisGCRA(rdb, 20, time.Second, ratelimit.WithPolicyFunc(LearnedPolicy), ratelimit.WithKeyPrefix(prefix+"gcra:"))
				require.NoError(t, err)
				u, err := New(lim, Config{Store: store})
				require.NoError(t, err)
				client := &http.Client{Transport: &Transport{Upstream: u}}
				for range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for ctx.Err() == nil {
							req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
							resp, err := client.Do(req)
							if err != nil {
								continue // the run's end, past its deadline
							}
							resp.Body.Close()
							mu.Lock()
							switch resp.StatusCode {
							case http.StatusOK:
								got.answers++
							case http.StatusTooManyRequests:
								got.limited++
							}
							mu.Unlock()
						}
					}()
				}
			}
			wg.Wait()
			t.Logf("%s: %d answers, %d 429s", tc.name, got.answers, got.limited)
			assert.LessOrEqual(t, got.limited, tc.limitedAtMost)
			assert.GreaterOrEqual(t, got.answers, tc.least)
			assert.LessOrEqual(t, got.answers, tc.most)
		})
	}
}

func TestAPauseOneReplicaLearnsHoldsForAnotherAtOnce(t *testing.T) {
	_, mini, _ := redistest.Miniredis(t, time.Now())
	backends := map[string]*RedisStore{"miniredis": mustRedisStore(t, mini, "")}
	if rdb := realRedis(t); rdb != nil {
		backends["redis-server"] = mustRedisStore(t, rdb, "test:pause:")
	}
	for name, store := range backends {
		t.Run(name, func(t *testing.T) {
			_, srv := newLiveUpstream(t, nil, 1, tellsRetryAfter)
			var ups []*Upstream
			for range 2 {
				lim, err := ratelimit.NewGCRA(100, time.Second, ratelimit.WithPolicyFunc(LearnedPolicy))
				require.NoError(t, err)
				u, err := New(lim, Config{Store: store, MaxWait: -1})
				require.NoError(t, err)
				ups = append(ups, u)
			}
			a := &http.Client{Transport: &Transport{Upstream: ups[0]}}
			resp, err := a.Get(srv.URL)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			resp, err = a.Get(srv.URL)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the upstream's one call a second is spent")

			b := &http.Client{Transport: &Transport{Upstream: ups[1]}}
			_, err = b.Get(srv.URL)
			require.ErrorIs(t, err, ErrLimited, "the other replica does not call during the pause")
		})
	}
}

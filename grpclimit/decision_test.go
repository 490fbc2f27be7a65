package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zone calendarDay names, whatever the machine has

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/grpclimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// recorder is a ratelimit.Decider of another package around a stack: it
// keeps the Decision and error of the latest call, which is what the
// interceptor read. Calls are sequential.
type recorder struct {
	ratelimit.Decider
	d   ratelimit.Decision
	err error
}

func (r *recorder) Allow(ctx context.Context, key string, n int) (ratelimit.Result, error) {
	d, err := r.Decide(ctx, key, n)
	return d.Result, err
}

func (r *recorder) Decide(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	r.d, r.err = r.Decider.Decide(ctx, key, n)
	return r.d, r.err
}

// failing is a backend that answers every call with err while err is set,
// and as the limiter it wraps otherwise; its policies are that limiter's
// either way, as a Redis limiter's are while Redis is down.
type failing struct {
	ratelimit.Decider
	err error
}

func (f *failing) Allow(ctx context.Context, key string, n int) (ratelimit.Result, error) {
	d, err := f.Decide(ctx, key, n)
	return d.Result, err
}

func (f *failing) Decide(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	if f.err != nil {
		return ratelimit.Decision{}, f.err
	}
	return f.Decider.Decide(ctx, key, n)
}

// wantFields returns the metadata that tells Decision d, formatted here
// from d alone: every policy of d in ratelimit-policy, the bound one in
// ratelimit and ratelimit-limit, the Result's numbers.
func wantFields(d ratelimit.Decision) map[string][]string {
	ceil := func(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }
	items := make([]string, len(d.Policies))
	for i, p := range d.Policies {
		items[i] = fmt.Sprintf("%q;q=%d", p.Name, p.Limit)
		if p.Window > 0 {
			items[i] += fmt.Sprintf(";w=%d", ceil(p.Window))
		}
	}
	reset := ceil(max(d.ResetAfter, 0))
	if !d.Allowed {
		reset = max(ceil(d.RetryAfter), 1)
	}
	r, t := strconv.Itoa(max(d.Remaining, 0)), strconv.FormatInt(reset, 10)
	// A denial: the bound policy, whose t is the retry-after. An allowed
	// call: every policy whose Result the Decision holds, the bound one
	// first, each with its own r and its effective window as t.
	rl := fmt.Sprintf("%q;r=%s;t=%s", d.Policy.Name, r, t)
	if d.Allowed {
		item := func(i, remaining int) string {
			v := fmt.Sprintf("%q;r=%d", d.Policies[i].Name, max(remaining, 0))
			if next, ok := d.NextUnit(i); ok {
				v += fmt.Sprintf(";t=%d", max(ceil(next), 1))
			}
			return v
		}
		rl = item(d.PolicyIndex, d.Remaining)
		if len(d.Parts) == len(d.Policies) {
			for i := range d.Policies {
				if i != d.PolicyIndex {
					rl += ", " + item(i, d.Parts[i].Remaining)
				}
			}
		}
	}
	md := map[string][]string{
		"ratelimit-remaining": {r},
		"ratelimit-reset":     {t},
		"ratelimit":           {rl},
	}
	if d.Policy.Limit > 0 {
		md["ratelimit-limit"] = []string{strconv.Itoa(d.Policy.Limit)}
		md["ratelimit-policy"] = []string{strings.Join(items, ", ")}
	}
	if !d.Allowed {
		md["retry-after"] = []string{t}
	}
	return md
}

// TestMetadataTellsTheDecisionThroughEveryStack runs the production stacks,
// each of thirteen limiters (four of them a Prefetch over an in-process
// limiter, whose failures are injected around the Prefetch, since it takes
// only the limiters themselves) on its own and inside each decorator, with
// the backend up, down, and failing with an error of each other class, and
// checks every call's metadata and code against the Decision the
// interceptor got: what it sends is what the Decision says, and names only
// the policies the Decision lists.
func TestMetadataTellsTheDecisionThroughEveryStack(t *testing.T) {
	type built = builtLimiter
	limiters := []struct {
		name  string
		build func(*testing.T, ratelimit.Clock) built
	}{
		{"TokenBucket", func(t *testing.T, c ratelimit.Clock) built {
			l, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 2, ratelimit.WithClock(c))
			require.NoError(t, err)
			return built{l, []string{"default"}, nil}
		}},
		{"GCRA", func(t *testing.T, c ratelimit.Clock) built {
			l, err := ratelimit.NewGCRA(2, 2*time.Second, ratelimit.WithClock(c))
			require.NoError(t, err)
			return built{l, []string{"default"}, nil}
		}},
		{"FixedWindow", func(t *testing.T, c ratelimit.Clock) built {
			l, err := ratelimit.NewFixedWindow(2, time.Minute, ratelimit.WithClock(c))
			require.NoError(t, err)
			return built{l, []string{"default"}, nil}
		}},
		{"Composite with a PerCall part", func(t *testing.T, c ratelimit.Clock) built {
			return built{composite(t, c, 3, 2), []string{"requests", "tokens"}, nil}
		}},
		{"SlidingLog", func(t *testing.T, c ratelimit.Clock) built {
			l, err := ratelimit.NewSlidingLog(2, 10*time.Second, ratelimit.WithClock(c))
			require.NoError(t, err)
			return built{l, []string{"default"}, nil}
		}},
		{"SlidingCounter", func(t *testing.T, c ratelimit.Clock) built {
			l, err := ratelimit.NewSlidingCounter(2, 10*time.Second, ratelimit.WithClock(c))
			require.NoError(t, err)
			return built{l, []string{"default"}, nil}
		}},
		{"CalendarWindow", func(t *testing.T, c ratelimit.Clock) built {
			return built{calendarDay(t, c, 2), []string{"default"}, nil}
		}},
		{"Composite of a sliding log and a calendar day", func(t *testing.T, c ratelimit.Clock) built {
			perUser, err := ratelimit.NewSlidingLog(3, time.Minute, ratelimit.WithClock(c))
			require.NoError(t, err)
			comp, err := ratelimit.NewComposite(
				ratelimit.Part{Name: "per-user", Limiter: perUser, PerCall: true},
				ratelimit.Part{Name: "day", Limiter: calendarDay(t, c, 2)},
			)
			require.NoError(t, err)
			return built{comp, []string{"per-user", "day"}, nil}
		}},
		// A Prefetch over each in-process limiter it takes, hot from its
		// first call (HotCalls 1), in blocks of 2 of a limit of 4: of the 5
		// calls, the first is decided by the backend, the second takes a
		// block and the third spends it, the fourth's take is denied and it
		// is decided by the backend, as is the fifth (denied). The stacks
		// below put it inside each decorator: Guard(Prefetch(...)) and so on.
		{"Prefetch(TokenBucket)", func(t *testing.T, c ratelimit.Clock) built {
			return leased(t, func(h ratelimit.Hooks) (ratelimit.Limiter, error) {
				return ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 4, ratelimit.WithClock(c), ratelimit.WithHooks(h))
			})
		}},
		{"Prefetch(GCRA)", func(t *testing.T, c ratelimit.Clock) built {
			return leased(t, func(h ratelimit.Hooks) (ratelimit.Limiter, error) {
				return ratelimit.NewGCRA(4, 4*time.Second, ratelimit.WithClock(c), ratelimit.WithHooks(h))
			})
		}},
		{"Prefetch(FixedWindow)", func(t *testing.T, c ratelimit.Clock) built {
			return leased(t, func(h ratelimit.Hooks) (ratelimit.Limiter, error) {
				return ratelimit.NewFixedWindow(4, time.Minute, ratelimit.WithClock(c), ratelimit.WithHooks(h))
			})
		}},
		{"Prefetch(PolicyFunc TokenBucket)", func(t *testing.T, c ratelimit.Clock) built {
			return leased(t, func(h ratelimit.Hooks) (ratelimit.Limiter, error) {
				return ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 9, ratelimit.WithClock(c), ratelimit.WithHooks(h),
					ratelimit.WithPolicyFunc(func(context.Context, string) (ratelimit.Policy, error) {
						return ratelimit.Policy{Limit: 4, Window: 8 * time.Second}, nil
					}))
			})
		}},
		{"PolicyFunc", func(t *testing.T, c ratelimit.Clock) built {
			l, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 5, ratelimit.WithClock(c),
				ratelimit.WithPolicyFunc(func(context.Context, string) (ratelimit.Policy, error) {
					return ratelimit.Policy{Limit: 2, Window: 4 * time.Second}, nil
				}))
			require.NoError(t, err)
			return built{l, []string{"default"}, nil}
		}},
	}
	stacks := []struct {
		name  string
		guard bool // a Guard answers the backend's failures
		wrap  func(*testing.T, ratelimit.Clock, ratelimit.Limiter) (ratelimit.Decider, []string)
	}{
		{"bare", false, func(_ *testing.T, _ ratelimit.Clock, l ratelimit.Limiter) (ratelimit.Decider, []string) {
			return l.(ratelimit.Decider), nil
		}},
		{"Guard FailOpen", true, func(t *testing.T, c ratelimit.Clock, l ratelimit.Limiter) (ratelimit.Decider, []string) {
			g, err := ratelimit.NewGuard(l, ratelimit.GuardConfig{OnFailure: ratelimit.FailOpen, Clock: c})
			require.NoError(t, err)
			return g, nil
		}},
		{"Guard FailClosed", true, func(t *testing.T, c ratelimit.Clock, l ratelimit.Limiter) (ratelimit.Decider, []string) {
			g, err := ratelimit.NewGuard(l, ratelimit.GuardConfig{OnFailure: ratelimit.FailClosed, Clock: c})
			require.NoError(t, err)
			return g, nil
		}},
		{"Guard FailOver to a Composite", true, func(t *testing.T, c ratelimit.Clock, l ratelimit.Limiter) (ratelimit.Decider, []string) {
			g, err := ratelimit.NewGuard(l, ratelimit.GuardConfig{OnFailure: ratelimit.FailOver, Fallback: composite(t, c, 1, 2), Clock: c})
			require.NoError(t, err)
			return g, []string{"requests", "tokens"}
		}},
		{"DenyCache", false, func(t *testing.T, c ratelimit.Clock, l ratelimit.Limiter) (ratelimit.Decider, []string) {
			d, err := ratelimit.NewDenyCache(l, ratelimit.DenyCacheConfig{Clock: c})
			require.NoError(t, err)
			return d, nil
		}},
		{"Shadow", false, func(t *testing.T, c ratelimit.Clock, l ratelimit.Limiter) (ratelimit.Decider, []string) {
			s, err := ratelimit.NewShadow(l, ratelimit.ShadowConfig{Clock: c})
			require.NoError(t, err)
			return s, nil
		}},
		{"Guard(DenyCache)", true, func(t *testing.T, c ratelimit.Clock, l ratelimit.Limiter) (ratelimit.Decider, []string) {
			d, err := ratelimit.NewDenyCache(l, ratelimit.DenyCacheConfig{Clock: c})
			require.NoError(t, err)
			g, err := ratelimit.NewGuard(d, ratelimit.GuardConfig{OnFailure: ratelimit.FailClosed, Clock: c})
			require.NoError(t, err)
			return g, nil
		}},
	}
	backends := []struct {
		name string
		err  error
	}{
		{"up", nil},
		{"down", fmt.Errorf("%w: dial tcp: connection refused", ratelimit.ErrBackend)},
		{"policy error", fmt.Errorf("%w: plan store: timeout", ratelimit.ErrPolicy)},
		{"corrupt state", fmt.Errorf("key k: %w", ratelimit.ErrCorruptState)},
	}

	for _, lc := range limiters {
		for _, sc := range stacks {
			for _, bc := range backends {
				t.Run(lc.name+"/"+sc.name+"/"+bc.name, func(t *testing.T) {
					clock := ratelimittest.NewClock(epoch)
					b := lc.build(t, clock)
					stack, more := sc.wrap(t, clock, &failing{Decider: b.l, err: bc.err})
					rec := &recorder{Decider: stack}
					in, err := grpclimit.NewInterceptor(rec, byPlan)
					require.NoError(t, err)
					names := append(b.names, more...)

					sources := map[ratelimit.Source]int{}
					calls := 5
					if b.backendCalls != nil {
						calls = 7 // a Prefetch's first denial is the fifth call's
					}
					for call := range calls {
						md, ran, err := unary(t, in, "k")
						d := rec.d
						sources[d.Source]++
						switch {
						case rec.err == nil:
							assert.Equal(t, wantFields(d), md, "call %d: %+v", call, d)
							assert.Equal(t, d.Allowed, ran, "call %d", call)
							if d.Allowed {
								assert.NoError(t, err, "call %d", call)
							} else {
								assert.Equal(t, codes.ResourceExhausted, status.Code(err), "call %d", call)
							}
							require.NotEmpty(t, d.Policies, "call %d", call)
							assert.Equal(t, d.Policy.Limit, d.Limit, "call %d: the policy named is the one whose numbers are shown", call)
							for _, p := range d.Policies {
								assert.Contains(t, names, p.Name, "call %d: only policies that apply", call)
							}
						case d.Source == ratelimit.FromShadow:
							assert.NoError(t, err, "call %d: a Shadow that does not enforce denies no one", call)
							assert.Empty(t, md, "call %d", call)
							assert.True(t, ran, "call %d", call)
						case errors.Is(rec.err, ratelimit.ErrCaller), errors.Is(rec.err, ratelimit.ErrCorruptState):
							assert.Equal(t, codes.Unavailable, status.Code(err), "call %d", call)
							assert.Equal(t, map[string][]string{"retry-after": {"1"}}, md, "call %d", call)
							assert.False(t, ran, "call %d: an unknown limit is not lifted", call)
						default:
							assert.NoError(t, err, "call %d: fails open", call)
							assert.Empty(t, md, "call %d", call)
							assert.True(t, ran, "call %d", call)
						}
					}

					if b.backendCalls != nil && bc.name == "up" {
						// The backend decided the calls it was forwarded
						// (cost 1) and the takes (cost 2, one per block);
						// every other call was spent from a block.
						// A DenyCache answered the calls after the denial.
						fromBlocks := calls - b.backendCalls[1] - sources[ratelimit.FromDenyCache]
						assert.Equal(t, 2, fromBlocks, "calls spent from a block")
						assert.Equal(t, 2, b.backendCalls[2], "takes of a block of 2")
					}

					switch {
					case bc.name == "up" && sc.name == "DenyCache":
						assert.Positive(t, sources[ratelimit.FromDenyCache], "answered locally after a denial")
					case bc.name == "up" && sc.name == "Shadow":
						assert.Positive(t, sources[ratelimit.FromShadow], "denials let through")
					case bc.name == "up":
						assert.Equal(t, calls, sources[ratelimit.FromBackend]+sources[ratelimit.FromDenyCache])
					case bc.name == "down" && sc.guard:
						assert.Zero(t, sources[ratelimit.FromBackend], "the Guard answered")
					}
				})
			}
		}
	}
}

// builtLimiter is a limiter of the table: the Decider, the policies it may
// name and, for a Prefetch, the backend's calls by cost (nil otherwise).
type builtLimiter struct {
	l            ratelimit.Decider
	names        []string
	backendCalls map[int]int
}

// costCounter is the Hooks of a Prefetch's backend: it counts the calls the
// backend decided, by cost. Calls are sequential.
type costCounter struct {
	ratelimit.NopHooks
	calls map[int]int
}

func (c *costCounter) Decided(ev ratelimit.Event) { c.calls[ev.Cost]++ }

// leased returns a Prefetch, hot from a key's first call in blocks of 2
// (HotCalls 1, MinBlock 2, MaxShare 2), around the limiter build returns
// with a Hooks that counts its calls.
func leased(t *testing.T, build func(ratelimit.Hooks) (ratelimit.Limiter, error)) builtLimiter {
	t.Helper()
	counter := &costCounter{calls: map[int]int{}}
	backend, err := build(counter)
	require.NoError(t, err)
	l, err := ratelimit.NewPrefetch(backend, ratelimit.PrefetchConfig{HotCalls: 1, MinBlock: 2, MaxShare: 2})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, l.Close(context.Background())) })
	return builtLimiter{l, []string{"default"}, counter.calls}
}

// calendarDay returns a CalendarWindow of limit a day in New York: at
// epoch (19:00 there) its window is 24 hours long and ends in 5 hours, so
// w and t differ from every other limiter's.
func calendarDay(t *testing.T, c ratelimit.Clock, limit int) *ratelimit.CalendarWindow {
	t.Helper()
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	l, err := ratelimit.NewCalendarWindow(limit, ratelimit.Calendar{Period: ratelimit.CalendarDay, Location: ny}, ratelimit.WithClock(c))
	require.NoError(t, err)
	return l
}

// composite returns a Composite of a PerCall part "requests" of
// requests a minute and a part "tokens", a token bucket of tokens
// refilling 1 a second.
func composite(t *testing.T, c ratelimit.Clock, requests, tokens int) *ratelimit.Composite {
	t.Helper()
	perMinute, err := ratelimit.NewFixedWindow(requests, time.Minute, ratelimit.WithClock(c))
	require.NoError(t, err)
	bucket, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), tokens, ratelimit.WithClock(c))
	require.NoError(t, err)
	comp, err := ratelimit.NewComposite(
		ratelimit.Part{Name: "requests", Limiter: perMinute, PerCall: true},
		ratelimit.Part{Name: "tokens", Limiter: bucket},
	)
	require.NoError(t, err)
	return comp
}

func TestCallsOfDifferentPoliciesEachGetTheirOwnFields(t *testing.T) {
	plans := map[string]ratelimit.Policy{
		"free": {Limit: 1000, Window: time.Minute},
		"pro":  {Limit: 5000, Window: time.Hour},
		"team": {Limit: 9000, Window: 2 * time.Hour},
	}
	l, err := ratelimit.NewGCRA(1000, time.Minute, ratelimit.WithPolicyFunc(func(_ context.Context, key string) (ratelimit.Policy, error) {
		return plans[key], nil
	}))
	require.NoError(t, err)
	in, err := grpclimit.NewInterceptor(l, byPlan)
	require.NoError(t, err)
	want := map[string]string{
		"free": `"default";q=1000;w=60`,
		"pro":  `"default";q=5000;w=3600`,
		"team": `"default";q=9000;w=7200`,
	}

	// Concurrent calls of alternating plans: the cache of formatted
	// policies changes hands all the time, and every call still gets its
	// own plan's fields.
	keys := []string{"free", "pro", "team"}
	done := make(chan struct{})
	for w := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 200 {
				key := keys[(w+i)%len(keys)]
				md, _, err := unary(t, in, key)
				if !assert.NoError(t, err) || !assert.Equal(t, []string{want[key]}, md["ratelimit-policy"], key) {
					return
				}
				assert.Equal(t, []string{strconv.Itoa(plans[key].Limit)}, md["ratelimit-limit"], key)
			}
		}()
	}
	for range 4 {
		<-done
	}
}

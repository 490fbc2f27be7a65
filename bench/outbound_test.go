package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/outbound"
)

// The closed loop of BenchmarkOutboundFleet: an upstream that allows
// fleetHigh calls a second and fleetLow from fleetDrop on, called for
// fleetDuration by fleetReplicas replicas of fleetWorkers workers each.
const (
	fleetDuration = 20 * time.Second
	fleetDrop     = 10 * time.Second
	fleetHigh     = 10 // calls a second before the drop, and the clients' own limit
	fleetLow      = 5  // calls a second from the drop on
	fleetReplicas = 3
	fleetWorkers  = 24 // per replica

	// fleetSecondsEnv, set to a whole number of seconds, shortens the run
	// for a quick check; the drop is then at half of it, rounded down.
	fleetSecondsEnv = "OUTBOUND_BENCH_SECONDS"
	// fleetEventsEnv, set to anything, logs every pause, learned limit and
	// upstream 429 the replicas' Observers hear, with its time in the run.
	fleetEventsEnv = "OUTBOUND_BENCH_EVENTS"

	// fleetPartition is the one key of the upstream's limiter: every
	// replica calls with one credential.
	fleetPartition = "fleet"
)

// fleetUpstreamKind says which fields an upstream of the closed loop
// sends.
type fleetUpstreamKind int

const (
	// upstreamIETF is httplimit's middleware, with its default fields:
	// RateLimit and RateLimit-Policy, and the drafts' legacy ones.
	upstreamIETF fleetUpstreamKind = iota
	// upstreamIETFOnly is httplimit's middleware sending RateLimit and
	// RateLimit-Policy only (WithHeaderStyle(IETFHeaders)).
	upstreamIETFOnly
	// upstreamVendor sends X-RateLimit-Remaining and X-RateLimit-Reset
	// (whole seconds until the limit is full again) on every answer, and
	// nothing else: a 429 without Retry-After.
	upstreamVendor
	// upstreamRetryAfter sends nothing on a 2xx, and a 429 with
	// Retry-After: the limiter's RetryAfter in whole seconds, rounded up.
	upstreamRetryAfter
)

// fleetScenario is one configuration of BenchmarkOutboundFleet.
type fleetScenario struct {
	name     string
	upstream fleetUpstreamKind
	drops    bool // the upstream's limit drops to fleetLow at the drop
	learns   bool // the clients learn: WithPolicyFunc(LearnedPolicy) and the default parsers
}

var fleetScenarios = []fleetScenario{
	{name: "learn-ietf", upstream: upstreamIETF, drops: true, learns: true},
	{name: "learn-ietf-only", upstream: upstreamIETFOnly, drops: true, learns: true},
	{name: "learn-vendor", upstream: upstreamVendor, drops: true, learns: true},
	{name: "learn-retry-after", upstream: upstreamRetryAfter, drops: true, learns: true},
	{name: "no-learning", upstream: upstreamIETF, drops: true, learns: false},
	{name: "configured-right", upstream: upstreamIETF, drops: false, learns: true},
}

// BenchmarkOutboundFleet runs the closed loop of package outbound: an
// upstream whose exact in-process limit drops from 10/s to 5/s halfway,
// and 3 replicas of 24 workers each calling it in a loop through an
// outbound.Transport, each replica with its own limiter and store on one
// shared Redis. Each iteration is one whole run (fleetDuration): run it
// with -benchtime 1x. It reports the answers (2xx) and 429s the replicas
// got, the allowance (the sum over the run's seconds of the upstream's
// limit for that second), the share of it used, and the share of calls
// answered 429.
//
// The replicas' Redis is the one at RATELIMIT_BENCH_REDIS_ADDR when set,
// else a throwaway redis-server when one is on PATH, else miniredis in
// this process; the log names it. It skips unless -benchtime is 1x, so
// that a run of every benchmark for a time, or a smoke run of 100x, does
// not take minutes.
func BenchmarkOutboundFleet(b *testing.B) {
	if f := flag.Lookup("test.benchtime"); f == nil || f.Value.String() != "1x" {
		b.Skip("each iteration is a whole run of 20 s: run it with -benchtime 1x (and -count for more runs)")
	}
	duration, drop := fleetTimes(b)
	for _, sc := range fleetScenarios {
		b.Run(sc.name, func(b *testing.B) {
			addr, backend := fleetRedis(b)
			b.Logf("replicas' Redis: %s; %v, drop at %v", backend, duration, drop)
			var sum fleetResult
			for i := 0; i < b.N; i++ {
				r := runFleet(b, sc, addr, duration, drop)
				r.log(b)
				sum.add(r)
			}
			n := float64(b.N)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(sum.answers)/n, "answers")
			b.ReportMetric(float64(sum.limited)/n, "429s")
			b.ReportMetric(float64(sum.allowance)/n, "allowance")
			b.ReportMetric(percent(sum.answers, sum.allowance), "used-%")
			b.ReportMetric(percent(sum.limited, sum.answers+sum.limited), "429-%")
			b.ReportMetric(float64(sum.pauses)/n, "pauses")
			b.ReportMetric(sum.paused.Seconds()/n, "paused-s")
		})
	}
}

// fleetTimes returns the run's length and the time of the drop:
// fleetDuration and fleetDrop, or fleetSecondsEnv's.
func fleetTimes(tb testing.TB) (duration, drop time.Duration) {
	v := os.Getenv(fleetSecondsEnv)
	if v == "" {
		return fleetDuration, fleetDrop
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 2 {
		tb.Fatalf("%s=%q: want a whole number of seconds, at least 2", fleetSecondsEnv, v)
	}
	return time.Duration(n) * time.Second, time.Duration(n/2) * time.Second
}

// percent returns part/whole × 100, or 0 for a whole of 0.
func percent(part, whole int64) float64 {
	if whole == 0 {
		return 0
	}
	return float64(part) / float64(whole) * 100
}

// fleetRedis returns the address of the Redis the replicas share, and
// what it is.
func fleetRedis(b *testing.B) (addr, backend string) {
	if addr := os.Getenv(redisAddrEnv); addr != "" {
		return addr, "Redis at " + addr + " (" + redisAddrEnv + ")"
	}
	if _, err := exec.LookPath("redis-server"); err == nil {
		s := redistest.Start(b)
		return s.Addr, "a throwaway redis-server on " + s.Addr
	}
	m := miniredis.RunT(b)
	return m.Addr(), "miniredis on " + m.Addr() + " (no redis-server on PATH)"
}

// fleetRuns numbers the runs, so that each has Redis keys of its own.
var fleetRuns atomic.Int64

// fleetResult is what one run of the closed loop counted.
type fleetResult struct {
	name      string
	limits    []int         // the upstream's limit in each second
	answers   int64         // 2xx answers
	limited   int64         // 429 answers
	other     int64         // other statuses and transport errors
	refused   int64         // calls the Transport did not send (ErrLimited)
	allowance int64         // the sum of limits
	pauses    int64         // Paused events
	paused    time.Duration // the sum of their pauses
	learned   int64         // Learned events

	// perSecond[s][r] counts replica r's answers and 429s in second s.
	perSecond [][fleetReplicas][2]int64
	events    []string // with fleetEventsEnv
}

// add adds r's totals to s's.
func (s *fleetResult) add(r fleetResult) {
	s.answers += r.answers
	s.limited += r.limited
	s.allowance += r.allowance
	s.pauses += r.pauses
	s.paused += r.paused
}

// log writes r's table, one line a second, its totals and its events.
func (r fleetResult) log(b *testing.B) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s, each second: the upstream's limit, then each replica's answers/429s\n", r.name)
	for s, row := range r.perSecond {
		fmt.Fprintf(&sb, "  s%02d limit %2d |", s, r.limits[s])
		var a, l int64
		for _, c := range row {
			fmt.Fprintf(&sb, " %2d/%-3d", c[0], c[1])
			a, l = a+c[0], l+c[1]
		}
		fmt.Fprintf(&sb, "| %2d/%d\n", a, l)
	}
	fmt.Fprintf(&sb, "  total: %d answers, %d 429s, %d other, %d not sent; allowance %d: %.1f%% used, %.2f%% 429s; %d pauses (%.1f s), %d limits learned",
		r.answers, r.limited, r.other, r.refused, r.allowance,
		percent(r.answers, r.allowance), percent(r.limited, r.answers+r.limited),
		r.pauses, r.paused.Seconds(), r.learned)
	for _, e := range r.events {
		sb.WriteString("\n  ")
		sb.WriteString(e)
	}
	b.Log(sb.String())
}

// fleetUpstream is the upstream of the closed loop: an exact in-process
// GCRA of fleetHigh a second (burst fleetHigh), lowered by its PolicyFunc
// to fleetLow a second (burst fleetLow) from start+drop on.
type fleetUpstream struct {
	limiter *ratelimit.GCRA
	start   atomic.Int64 // Unix ns; 0 before the run starts
	drop    time.Duration
	drops   bool
}

// newFleetUpstream returns an upstream that drops to fleetLow at drop after
// its start, if drops.
func newFleetUpstream(drops bool, drop time.Duration) (*fleetUpstream, error) {
	u := &fleetUpstream{drop: drop, drops: drops}
	l, err := ratelimit.NewGCRA(fleetHigh, time.Second, ratelimit.WithPolicyFunc(u.policy))
	if err != nil {
		return nil, err
	}
	u.limiter = l
	return u, nil
}

// policy is the upstream limiter's PolicyFunc: fleetLow a second once the
// drop has come, else the limiter's own.
func (u *fleetUpstream) policy(context.Context, string) (ratelimit.Policy, error) {
	if u.dropped(time.Now()) {
		return ratelimit.Policy{Limit: fleetLow, Window: time.Second}, nil
	}
	return ratelimit.Policy{}, nil
}

// dropped reports whether the drop has come at t.
func (u *fleetUpstream) dropped(t time.Time) bool {
	start := u.start.Load()
	return u.drops && start != 0 && t.UnixNano()-start >= int64(u.drop)
}

// limitAt returns the upstream's limit a second in second s of the run.
func (u *fleetUpstream) limitAt(s int) int {
	if u.drops && time.Duration(s)*time.Second >= u.drop {
		return fleetLow
	}
	return fleetHigh
}

// handler returns the upstream's HTTP handler, which sends the fields of
// kind.
func (u *fleetUpstream) handler(kind fleetUpstreamKind) (http.Handler, error) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	})
	switch kind {
	case upstreamIETF, upstreamIETFOnly:
		var opts []httplimit.Option
		if kind == upstreamIETFOnly {
			opts = append(opts, httplimit.WithHeaderStyle(httplimit.IETFHeaders))
		}
		m, err := httplimit.NewMiddleware(u.limiter, func(*http.Request) (string, error) { return fleetPartition, nil }, opts...)
		if err != nil {
			return nil, err
		}
		return m.Handler(ok), nil
	case upstreamVendor:
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res, err := u.limiter.Allow(r.Context(), fleetPartition, 1)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			h := w.Header()
			h.Set("X-RateLimit-Remaining", strconv.Itoa(res.Remaining))
			h.Set("X-RateLimit-Reset", strconv.FormatInt(ceilSeconds(res.ResetAfter), 10))
			if !res.Allowed {
				http.Error(w, "rate limited", http.StatusTooManyRequests)
				return
			}
			w.WriteHeader(http.StatusOK)
		}), nil
	case upstreamRetryAfter:
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res, err := u.limiter.Allow(r.Context(), fleetPartition, 1)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			if !res.Allowed {
				w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(res.RetryAfter), 10))
				http.Error(w, "rate limited", http.StatusTooManyRequests)
				return
			}
			w.WriteHeader(http.StatusOK)
		}), nil
	}
	return nil, fmt.Errorf("unknown upstream kind %d", kind)
}

// ceilSeconds returns d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	return int64((max(d, 0) + time.Second - 1) / time.Second)
}

// fleetEvents is what the replicas' Observers heard.
type fleetEvents struct {
	start   time.Time
	pauses  atomic.Int64
	paused  atomic.Int64 // ns
	learned atomic.Int64

	keep bool
	mu   sync.Mutex
	log  []string
}

// observe is the replicas' Observer for replica r.
func (e *fleetEvents) observe(r int) func(outbound.Event) {
	return func(ev outbound.Event) {
		switch ev.Kind {
		case outbound.Paused:
			e.pauses.Add(1)
			e.paused.Add(int64(ev.Pause))
		case outbound.Learned:
			e.learned.Add(1)
		case outbound.UpstreamLimited, outbound.StoreFailed:
		default:
			return
		}
		if !e.keep {
			return
		}
		line := fmt.Sprintf("%7.3fs r%d %-16s", time.Since(e.start).Seconds(), r+1, ev.Kind)
		switch ev.Kind {
		case outbound.Paused:
			line += " " + ev.Pause.String()
		case outbound.Learned:
			line += fmt.Sprintf(" %d per %v", ev.Policy.Limit, ev.Policy.Window)
		case outbound.UpstreamLimited:
			line += " " + strconv.Itoa(ev.Status)
		case outbound.StoreFailed:
			line += " " + ev.Err.Error()
		}
		e.mu.Lock()
		e.log = append(e.log, line)
		e.mu.Unlock()
	}
}

// runFleet runs the closed loop of sc once, for duration, the upstream's
// limit dropping at drop, the replicas on the Redis at addr.
func runFleet(b *testing.B, sc fleetScenario, addr string, duration, drop time.Duration) fleetResult {
	up, err := newFleetUpstream(sc.drops, drop)
	if err != nil {
		b.Fatal(err)
	}
	h, err := up.handler(sc.upstream)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	prefix := fmt.Sprintf("ratelimit-bench:outbound:%s:%d:", redisRunBase, fleetRuns.Add(1))
	events := &fleetEvents{keep: os.Getenv(fleetEventsEnv) != ""}
	clients := make([]*http.Client, fleetReplicas)
	for r := range clients {
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2 * fleetWorkers, MaxRetries: -1})
		defer func() { _ = rdb.Close() }()
		clients[r] = fleetClient(b, sc, rdb, prefix, events.observe(r))
	}

	seconds := int(duration / time.Second)
	res := fleetResult{name: sc.name, limits: make([]int, seconds), perSecond: make([][fleetReplicas][2]int64, seconds)}
	for s := range res.limits {
		res.limits[s] = up.limitAt(s)
		res.allowance += int64(res.limits[s])
	}
	var counts [fleetReplicas][][2]atomic.Int64
	for r := range counts {
		counts[r] = make([][2]atomic.Int64, seconds)
	}
	var other, refused atomic.Int64

	b.ResetTimer()
	start := time.Now()
	events.start = start
	up.start.Store(start.UnixNano())
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(duration))
	defer cancel()
	var wg sync.WaitGroup
	for r, client := range clients {
		for range fleetWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					status, err := fleetCall(ctx, client, srv.URL)
					switch {
					case errors.Is(err, outbound.ErrLimited):
						// The wait would pass the run's end: nothing
						// more to send.
						refused.Add(1)
						return
					case errors.Is(err, context.DeadlineExceeded):
						return // the run's end came during the call
					case err != nil:
						if end, _ := ctx.Deadline(); time.Now().Before(end) {
							other.Add(1)
							time.Sleep(10 * time.Millisecond)
						}
						continue
					}
					s := min(int(time.Since(start)/time.Second), seconds-1)
					switch {
					case status >= 200 && status < 300:
						counts[r][s][0].Add(1)
					case status == http.StatusTooManyRequests:
						counts[r][s][1].Add(1)
					default:
						other.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	b.StopTimer()

	for r := range counts {
		for s := range counts[r] {
			a, l := counts[r][s][0].Load(), counts[r][s][1].Load()
			res.perSecond[s][r] = [2]int64{a, l}
			res.answers += a
			res.limited += l
		}
	}
	res.other, res.refused = other.Load(), refused.Load()
	res.pauses, res.paused, res.learned = events.pauses.Load(), time.Duration(events.paused.Load()), events.learned.Load()
	res.events = events.log
	return res
}

// fleetClient returns one replica's HTTP client for sc: an
// outbound.Transport over an Upstream of its own, whose limiter (a Redis
// GCRA of fleetHigh a second) and store are on rdb under prefix, shared
// with the other replicas.
func fleetClient(b *testing.B, sc fleetScenario, rdb *redis.Client, prefix string, observer func(outbound.Event)) *http.Client {
	store, err := outbound.NewRedisStore(rdb, prefix+"store:")
	if err != nil {
		b.Fatal(err)
	}
	opts := []ratelimit.RedisOption{ratelimit.WithKeyPrefix(prefix + "gcra:")}
	cfg := outbound.Config{Store: store, Observer: observer}
	if sc.learns {
		opts = append(opts, ratelimit.WithPolicyFunc(outbound.LearnedPolicy))
	} else {
		cfg.IgnorePolicies, cfg.Parsers = true, []outbound.Parser{}
	}
	limiter, err := ratelimit.NewRedisGCRA(rdb, fleetHigh, time.Second, opts...)
	if err != nil {
		b.Fatal(err)
	}
	u, err := outbound.New(limiter, cfg)
	if err != nil {
		b.Fatal(err)
	}
	base := &http.Transport{MaxIdleConnsPerHost: fleetWorkers}
	b.Cleanup(base.CloseIdleConnections)
	return &http.Client{Transport: &outbound.Transport{Upstream: u, Base: base}}
}

// fleetCall makes one call to url and returns its status.
func fleetCall(ctx context.Context, client *http.Client, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// BenchmarkOutboundTransportOverhead times one request to a local server
// that answers 200 with no body, through a bare http.Transport and through
// an outbound.Transport over the same kind of http.Transport, whose
// in-process GCRA (WithPolicyFunc(LearnedPolicy), the default parsers, a
// MemoryStore) allows far more than any run asks, so that no request ever
// waits: the difference is the outbound Transport's own cost. The stub
// and outbound-stub rows do the same over a RoundTripper that answers at
// once without a network (stubRoundTripper), which times that cost
// without the round trip's noise. The limiter-only row times the GCRA's Allow alone, with what the Transport
// gives it, to tell the limiter's allocations from the Transport's. Each
// row runs on one goroutine (run=serial) and under b.RunParallel
// (run=parallel). Compare with benchstat -col /transport.
func BenchmarkOutboundTransportOverhead(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	for _, run := range []string{"serial", "parallel"} {
		for _, kind := range []string{"bare", "outbound", "stub", "outbound-stub", "limiter-only"} {
			b.Run("transport="+kind+"/run="+run, func(b *testing.B) {
				b.ReportAllocs()
				if kind == "limiter-only" {
					benchOverheadLimiter(b, srv.URL, run == "parallel")
					return
				}
				var rt http.RoundTripper
				if strings.HasSuffix(kind, "stub") {
					rt = stubRoundTripper{}
				} else {
					base := &http.Transport{MaxIdleConnsPerHost: 64}
					defer base.CloseIdleConnections()
					rt = base
				}
				if strings.HasPrefix(kind, "outbound") {
					rt = &outbound.Transport{Upstream: overheadUpstream(b), Base: rt}
				}
				roundTrip := func(req *http.Request) {
					resp, err := rt.RoundTrip(req)
					if err != nil {
						b.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Fatalf("status %d", resp.StatusCode)
					}
				}
				newRequest := func() *http.Request {
					req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
					if err != nil {
						b.Fatal(err)
					}
					return req
				}
				// Warm the connections, so that no row times a dial.
				roundTrip(newRequest())
				b.ResetTimer()
				if run == "serial" {
					req := newRequest()
					for b.Loop() {
						roundTrip(req)
					}
					return
				}
				b.RunParallel(func(pb *testing.PB) {
					req := newRequest()
					for pb.Next() {
						roundTrip(req)
					}
				})
			})
		}
	}
}

// stubResponse is the answer of stubRoundTripper: 200, no fields, no
// body. It is shared, and only read.
var stubResponse = &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody}

// stubRoundTripper answers every request with stubResponse at once,
// without a network: the overhead rows' stub and outbound-stub time the
// outbound Transport's own cost without the noise of a round trip.
type stubRoundTripper struct{}

// RoundTrip returns stubResponse.
func (stubRoundTripper) RoundTrip(*http.Request) (*http.Response, error) {
	return stubResponse, nil
}

// overheadLimit is the limit a second of the overhead rows' GCRA: one
// unit a nanosecond, far more than any run asks, so that it never waits.
const overheadLimit = 1_000_000_000

// overheadLimiter returns the overhead rows' limiter.
func overheadLimiter(b *testing.B) *ratelimit.GCRA {
	l, err := ratelimit.NewGCRA(overheadLimit, time.Second, ratelimit.WithPolicyFunc(outbound.LearnedPolicy))
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// overheadUpstream returns the outbound row's Upstream: the overhead
// limiter, a MemoryStore, the default parsers.
func overheadUpstream(b *testing.B) *outbound.Upstream {
	u, err := outbound.New(overheadLimiter(b), outbound.Config{Store: outbound.NewMemoryStore(nil)})
	if err != nil {
		b.Fatal(err)
	}
	return u
}

// benchOverheadLimiter times the overhead limiter's Allow alone, for the
// partition the outbound row's requests have (the server's host), with a
// request's context as the Transport gives it.
func benchOverheadLimiter(b *testing.B, url string, parallel bool) {
	l := overheadLimiter(b)
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		b.Fatal(err)
	}
	partition, err := outbound.ByHost(req)
	if err != nil {
		b.Fatal(err)
	}
	ctx := req.Context()
	allow := func() {
		if res, err := l.Allow(ctx, partition, 1); err != nil || !res.Allowed {
			b.Fatalf("Allow: %+v, %v", res, err)
		}
	}
	if !parallel {
		for b.Loop() {
			allow()
		}
		return
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			allow()
		}
	})
}

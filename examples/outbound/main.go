// Command outbound shows a fleet calling another's API within the limit
// the API states: an upstream built with httplimit allows 10 calls a
// second, then 5 a second from 10 s on, and says so in the IETF RateLimit
// and RateLimit-Policy fields of its answers. Three replicas, each with
// its own http.Client over an outbound.Transport whose limiter (a Redis
// GCRA of 10 a second) and store are on one shared Redis, call it from 24
// workers each for 20 s. What one replica reads in an answer (a pause, the
// lower limit) holds for all three from their next call.
//
// Each second it prints the upstream's limit, each replica's answers
// (2xx) and 429s in that second, and when the fleet learns a new limit;
// at the end the totals and the share of the upstream's allowance (the
// sum over the seconds of its limit) the fleet used.
//
// With no configuration it starts an embedded Redis (miniredis) in this
// process. With REDIS_ADDR set (say 127.0.0.1:6379) the replicas use that
// server instead.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/examples/internal/demoredis"
	"github.com/ratelimit-go/ratelimit/examples/internal/demoserve"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/outbound"
)

const (
	duration = 20 * time.Second
	drop     = 10 * time.Second // when the upstream's limit drops
	high     = 10               // the upstream's calls a second before the drop, and what the replicas are configured with
	low      = 5                // its calls a second from the drop on
	replicas = 3
	workers  = 24 // per replica
	seconds  = int(duration / time.Second)

	// storePrefix starts the keys of what the replicas learn.
	storePrefix = "ratelimit-demo:outbound:"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "outbound:", err)
		os.Exit(1)
	}
}

// run starts Redis and the upstream, runs the replicas for duration and
// prints what they got.
func run() error {
	r, err := demoredis.Open()
	if err != nil {
		return err
	}
	defer r.Close()
	fmt.Println(r.Describe())

	up, err := newUpstream()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := demoserve.NewServer(up.handler)
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()
	url := "http://" + ln.Addr().String() + "/"

	fleet := make([]*replica, replicas)
	for i := range fleet {
		rep, err := newReplica(r.Addr, i)
		if err != nil {
			return err
		}
		defer rep.close()
		fleet[i] = rep
	}

	fmt.Printf("upstream: %d calls/s, %d/s from %v on; %d replicas × %d workers for %v, each replica configured with %d/s\n\n",
		high, low, drop, replicas, workers, duration, high)
	fmt.Print("      upstream")
	for i := range fleet {
		fmt.Printf("   replica %d", i+1)
	}
	fmt.Println("         all")
	fmt.Print("   s   limit/s")
	for range fleet {
		fmt.Print("    2xx  429")
	}
	fmt.Println("    2xx  429")

	start := time.Now()
	up.start.Store(start.UnixNano())
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(duration))
	defer cancel()
	var wg sync.WaitGroup
	for _, rep := range fleet {
		rep.mu.Lock()
		rep.start = start
		rep.mu.Unlock()
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rep.work(ctx, url, start)
			}()
		}
	}

	// One line a second, a little after the second has ended, so that
	// the answers read in it are counted.
	var total [2]int64
	for s := range seconds {
		time.Sleep(time.Until(start.Add(time.Duration(s+1)*time.Second + 50*time.Millisecond)))
		fmt.Printf("  %2d   %7d", s, limitAt(s))
		var all [2]int64
		for _, rep := range fleet {
			a, l := rep.counts[s][0].Load(), rep.counts[s][1].Load()
			fmt.Printf("   %4d %4d", a, l)
			all[0], all[1] = all[0]+a, all[1]+l
		}
		fmt.Printf("   %4d %4d", all[0], all[1])
		for _, rep := range fleet {
			if p := rep.learned(s); p != "" {
				fmt.Printf("  replica %d learned %s", rep.id+1, p)
			}
		}
		fmt.Println()
		total[0], total[1] = total[0]+all[0], total[1]+all[1]
	}
	wg.Wait()

	allowance := 0
	for s := range seconds {
		allowance += limitAt(s)
	}
	fmt.Println()
	for _, rep := range fleet {
		var a, l int64
		for s := range rep.counts {
			a, l = a+rep.counts[s][0].Load(), l+rep.counts[s][1].Load()
		}
		fmt.Printf("replica %d: %d answers, %d 429s\n", rep.id+1, a, l)
	}
	fmt.Printf("fleet: %d answers, %d 429s (%.1f%% of its calls)\n",
		total[0], total[1], percent(total[1], total[0]+total[1]))
	fmt.Printf("upstream's allowance: %d×%d + %d×%d = %d calls; used: %.1f%%\n",
		high, int(drop/time.Second), low, seconds-int(drop/time.Second), allowance, percent(total[0], int64(allowance)))
	return nil
}

// limitAt returns the upstream's limit a second in second s of the run.
func limitAt(s int) int {
	if time.Duration(s)*time.Second >= drop {
		return low
	}
	return high
}

// percent returns part/whole × 100, or 0 for a whole of 0.
func percent(part, whole int64) float64 {
	if whole == 0 {
		return 0
	}
	return float64(part) / float64(whole) * 100
}

// upstream is the API the fleet calls: an in-process GCRA of high calls a
// second (a burst of high), which its PolicyFunc lowers to low a second
// (a burst of low) from start+drop on, behind httplimit's middleware, which
// answers 429 past the limit and sends the IETF fields on every answer.
type upstream struct {
	start   atomic.Int64 // Unix ns; 0 until the run starts
	handler http.Handler
}

// newUpstream returns the upstream, its limit not yet dropping.
func newUpstream() (*upstream, error) {
	u := &upstream{}
	limiter, err := ratelimit.NewGCRA(high, time.Second, ratelimit.WithPolicyFunc(u.policy))
	if err != nil {
		return nil, err
	}
	// One key: the fleet calls with one credential.
	mw, err := httplimit.NewMiddleware(limiter, func(*http.Request) (string, error) { return "fleet", nil })
	if err != nil {
		return nil, err
	}
	u.handler = mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	}))
	return u, nil
}

// policy is the upstream limiter's PolicyFunc: low a second from the
// drop on, else the limiter's own.
func (u *upstream) policy(context.Context, string) (ratelimit.Policy, error) {
	if start := u.start.Load(); start != 0 && time.Now().UnixNano()-start >= int64(drop) {
		return ratelimit.Policy{Limit: low, Window: time.Second}, nil
	}
	return ratelimit.Policy{}, nil
}

// replica is one replica of the fleet: its own Redis client, limiter,
// Upstream and http.Client, and what its calls got.
type replica struct {
	id     int
	rdb    *redis.Client
	client *http.Client
	counts [seconds][2]atomic.Int64 // answers and 429s, by second of the run

	mu      sync.Mutex
	start   time.Time
	lessons [seconds][]string // the limits it learned, by second
}

// newReplica returns replica id, on the Redis at addr.
func newReplica(addr string, id int) (*replica, error) {
	rep := &replica{id: id}
	rep.rdb = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 2 * workers})
	// The budget the fleet shares: what the upstream documents, 10/s,
	// lowered while the upstream states less.
	limiter, err := ratelimit.NewRedisGCRA(rep.rdb, high, time.Second, ratelimit.WithPolicyFunc(outbound.LearnedPolicy))
	if err != nil {
		return nil, err
	}
	store, err := outbound.NewRedisStore(rep.rdb, storePrefix)
	if err != nil {
		return nil, err
	}
	up, err := outbound.New(limiter, outbound.Config{Store: store, Observer: rep.observe})
	if err != nil {
		return nil, err
	}
	rep.client = &http.Client{Transport: &outbound.Transport{
		Upstream: up,
		Base:     &http.Transport{MaxIdleConnsPerHost: workers},
	}}
	return rep, nil
}

// close closes the replica's connections.
func (rep *replica) close() {
	rep.client.CloseIdleConnections()
	_ = rep.rdb.Close()
}

// observe is the replica's outbound Observer: it notes the limits the
// replica learns.
func (rep *replica) observe(e outbound.Event) {
	if e.Kind != outbound.Learned {
		return
	}
	rep.mu.Lock()
	defer rep.mu.Unlock()
	if rep.start.IsZero() {
		return
	}
	s := min(int(time.Since(rep.start)/time.Second), seconds-1)
	p := fmt.Sprintf("%d per %v", e.Policy.Limit, e.Policy.Window)
	if e.Policy == (ratelimit.Policy{}) {
		p = "nothing (forgot the limit)"
	}
	for _, q := range rep.lessons[s] {
		if q == p {
			return
		}
	}
	rep.lessons[s] = append(rep.lessons[s], p)
}

// learned returns what the replica learned in second s, or "".
func (rep *replica) learned(s int) string {
	rep.mu.Lock()
	defer rep.mu.Unlock()
	return strings.Join(rep.lessons[s], ", ")
}

// work calls url in a loop until ctx ends, counting the answers by the
// second of the run, from start, they came in.
func (rep *replica) work(ctx context.Context, url string, start time.Time) {
	for ctx.Err() == nil {
		status, err := call(ctx, rep.client, url)
		if errors.Is(err, outbound.ErrLimited) || errors.Is(err, context.DeadlineExceeded) {
			return // the wait would pass the end of the run, or it has come
		}
		if err != nil {
			if end, _ := ctx.Deadline(); time.Now().Before(end) {
				fmt.Fprintf(os.Stderr, "replica %d: %v\n", rep.id+1, err)
				time.Sleep(100 * time.Millisecond)
			}
			continue
		}
		s := min(int(time.Since(start)/time.Second), seconds-1)
		switch {
		case status >= 200 && status < 300:
			rep.counts[s][0].Add(1)
		case status == http.StatusTooManyRequests:
			rep.counts[s][1].Add(1)
		}
	}
}

// call makes one call to url and returns its status.
func call(ctx context.Context, client *http.Client, url string) (int, error) {
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

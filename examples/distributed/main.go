// Command distributed shows one limit shared by several processes: three
// worker processes share one Redis token bucket (capacity 10, 5 tokens/s),
// each making 30 requests 0.1 s apart on the same key, and the total allowed
// stays within the bucket's bound however the requests interleave.
//
// With no configuration it starts an embedded Redis (miniredis) in this
// process and the workers, which are this program run again, connect to it
// over 127.0.0.1. With REDIS_ADDR set (say 127.0.0.1:6379) they use that
// server instead.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/examples/internal/demoredis"
)

const (
	workers  = 3
	requests = 30
	interval = 100 * time.Millisecond
	capacity = 10
	rate     = 5 // tokens per second
	key      = "demo:shared"
	// prefix is the demo's own key prefix, which the parent's limiter
	// shares with the workers' to reset the key.
	prefix = "ratelimit-demo:distributed:"

	workerEnv  = "RATELIMIT_DEMO_WORKER"
	resultMark = "RESULT "
)

func main() {
	var err error
	if id := os.Getenv(workerEnv); id != "" {
		err = worker(id)
	} else {
		err = parent()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "distributed:", err)
		os.Exit(1)
	}
}

// parent starts Redis if needed, runs the workers and prints the totals.
func parent() error {
	r, err := demoredis.Open()
	if err != nil {
		return err
	}
	defer r.Close()
	fmt.Println(r.Describe())

	// Start from a full bucket: the workers' limiter, given one prefix,
	// shares their key.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	bucket, err := ratelimit.NewRedisTokenBucket(r.Client, ratelimit.PerSecond(rate), capacity, ratelimit.WithKeyPrefix(prefix))
	if err != nil {
		return err
	}
	if err := bucket.Reset(ctx, key); err != nil {
		return fmt.Errorf("reset the demo key: %w", err)
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Printf("%d workers × %d requests, %v apart, on one bucket: capacity %d, %d tokens/s\n",
		workers, requests, interval, capacity, rate)

	reports := make([]report, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reports[i], errs[i] = runWorker(self, i+1, r.Addr)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return err
	}

	total := 0
	first, last := reports[0].first, reports[0].last
	for i, r := range reports {
		fmt.Printf("worker %d: allowed=%d\n", i+1, r.allowed)
		total += r.allowed
		first, last = min(first, r.first), max(last, r.last)
	}
	// Tokens can only be taken between the first request and the last:
	// the capacity plus what refills in that span.
	span := time.Duration(last - first)
	fmt.Printf("total allowed: %d of %d\n", total, workers*requests)
	fmt.Printf("theoretical bound: capacity + rate × span of the requests = %d + %d × %.2f s = %.1f (wall time %.1f s)\n",
		capacity, rate, span.Seconds(), capacity+rate*span.Seconds(), elapsed.Seconds())
	return nil
}

// report is what a worker tells the parent: how many requests were allowed,
// and when its first and last requests were made (Unix ns).
type report struct {
	allowed     int
	first, last int64
}

// runWorker runs one worker process, passes its output through, and returns
// its report.
func runWorker(self string, id int, addr string) (report, error) {
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), workerEnv+"="+strconv.Itoa(id), "REDIS_ADDR="+addr)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return report{}, err
	}
	if err := cmd.Start(); err != nil {
		return report{}, fmt.Errorf("start worker %d: %w", id, err)
	}
	var r report
	parsed := false
	scanner := bufio.NewScanner(out)
	for scanner.Scan() {
		line := scanner.Text()
		if rest, ok := strings.CutPrefix(line, resultMark); ok {
			_, err := fmt.Sscan(rest, &r.allowed, &r.first, &r.last)
			parsed = err == nil
			continue
		}
		fmt.Println(line)
	}
	if err := cmd.Wait(); err != nil {
		return report{}, fmt.Errorf("worker %d: %w", id, err)
	}
	if !parsed {
		return report{}, fmt.Errorf("worker %d reported no result", id)
	}
	return r, nil
}

// worker makes the requests on the shared bucket at REDIS_ADDR, which the
// parent set, and reports its count.
func worker(id string) error {
	r, err := demoredis.Open()
	if err != nil {
		return err
	}
	defer r.Close()
	limiter, err := ratelimit.NewRedisTokenBucket(r.Client, ratelimit.PerSecond(rate), capacity, ratelimit.WithKeyPrefix(prefix))
	if err != nil {
		return err
	}
	allowed := 0
	var first, last int64
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for i := range requests {
		if i > 0 {
			<-ticker.C
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if i == 0 {
			first = time.Now().UnixNano()
		}
		res, err := limiter.Allow(ctx, key, 1)
		last = time.Now().UnixNano()
		cancel()
		if err != nil {
			return err
		}
		if res.Allowed {
			allowed++
		}
		fmt.Printf("[worker %s] %02d allowed=%v\n", id, i, res.Allowed)
	}
	fmt.Printf("%s%d %d %d\n", resultMark, allowed, first, last)
	return nil
}

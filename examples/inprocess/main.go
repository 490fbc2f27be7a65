// Command inprocess runs an in-process token bucket on the real clock: a
// bucket of capacity 5 refilling at 2 tokens per second, asked for one token
// every 0.3 s, fifteen times. The burst and the refill let about the first
// eleven through; after that denials and grants alternate. It prints each
// decision and the whole tokens left.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "inprocess:", err)
		os.Exit(1)
	}
}

func run() error {
	const (
		capacity = 5
		rate     = 2 // tokens per second
		interval = 300 * time.Millisecond
	)
	limiter, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(rate), capacity)
	if err != nil {
		return err
	}
	fmt.Printf("token bucket: capacity %d, %d tokens/s, one request every %v\n", capacity, rate, interval)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	allowed := 0
	for i := 0; i < 15; i++ {
		if i > 0 {
			<-ticker.C
		}
		res, err := limiter.Allow(context.Background(), "user:42", 1)
		if err != nil {
			return err
		}
		if res.Allowed {
			allowed++
			fmt.Printf("[%02d] allowed  tokens left=%d\n", i, res.Remaining)
		} else {
			fmt.Printf("[%02d] denied   tokens left=%d  retry after %v\n", i, res.Remaining, res.RetryAfter.Round(time.Millisecond))
		}
	}
	fmt.Printf("%d of 15 allowed (expected 13: requests 11 and 13 are denied)\n", allowed)
	return nil
}

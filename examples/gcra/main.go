// Command gcra runs a Redis GCRA of 10 requests per minute per key. A burst
// of 10 passes at once; after that, one request every 6 s.
//
// It uses an embedded Redis whose clock it moves forward instead of waiting,
// or the server at REDIS_ADDR, where it really waits (about 30 s).
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/examples/internal/demoredis"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gcra:", err)
		os.Exit(1)
	}
}

func run() error {
	r, err := demoredis.Open()
	if err != nil {
		return err
	}
	defer r.Close()
	r.FreezeClock()
	fmt.Println(r.Describe())

	limiter, err := ratelimit.NewRedisGCRA(r.Client, 10, time.Minute)
	if err != nil {
		return err
	}
	key := fmt.Sprintf("demo:%d", time.Now().UnixNano()) // a fresh key each run
	allow := func(label string) (ratelimit.Result, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		res, err := limiter.Allow(ctx, key, 1)
		if err != nil {
			return res, err
		}
		verdict := "allowed"
		if !res.Allowed {
			verdict = fmt.Sprintf("limited, retry after %v", res.RetryAfter.Round(time.Millisecond))
		}
		fmt.Printf("%-14s %-30s remaining=%d\n", label, verdict, res.Remaining)
		return res, nil
	}

	fmt.Println("GCRA: 10 requests per minute")
	for i := 0; i < 12; i++ {
		if _, err := allow(fmt.Sprintf("burst #%02d", i+1)); err != nil {
			return err
		}
	}
	for i := 0; i < 5; i++ {
		r.Wait(6 * time.Second)
		if _, err := allow(fmt.Sprintf("+%ds", 6*(i+1))); err != nil {
			return err
		}
		if _, err := allow("  again"); err != nil {
			return err
		}
	}
	return nil
}

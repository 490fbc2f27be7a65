// Command fixedwindow runs a Redis fixed window of 20 requests per 30 s per
// key, asked for 25 times at once. The first 20 pass; the rest are limited
// until the window ends, when the key gets 20 more.
//
// It uses an embedded Redis whose clock it moves forward instead of waiting,
// or the server at REDIS_ADDR, where it really waits (30 s).
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
		fmt.Fprintln(os.Stderr, "fixedwindow:", err)
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

	limiter, err := ratelimit.NewRedisFixedWindow(r.Client, 20, 30*time.Second)
	if err != nil {
		return err
	}
	key := fmt.Sprintf("admin:%d", time.Now().UnixNano()) // a fresh key each run
	allow := func() (ratelimit.Result, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return limiter.Allow(ctx, key, 1)
	}

	fmt.Println("fixed window: 20 requests per 30 s, 25 requests at once")
	var last ratelimit.Result
	for i := 0; i < 25; i++ {
		res, err := allow()
		if err != nil {
			return err
		}
		if res.Allowed {
			fmt.Printf("request %02d: allowed  remaining=%d\n", i+1, res.Remaining)
		} else {
			fmt.Printf("request %02d: limited  window ends in %v\n", i+1, res.RetryAfter.Round(time.Millisecond))
		}
		last = res
	}
	fmt.Printf("waiting %v for the window to end\n", last.RetryAfter.Round(time.Millisecond))
	r.Wait(last.RetryAfter)
	res, err := allow()
	if err != nil {
		return err
	}
	fmt.Printf("after the window: allowed=%v remaining=%d\n", res.Allowed, res.Remaining)
	return nil
}

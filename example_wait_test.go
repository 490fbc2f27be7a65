package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// A worker calls an API that takes 5 calls a second, one at a time, and
// waits before each call for as long as the limiter says. WithoutJitter
// makes it sleep exactly that long, so that it gets the whole rate: three
// calls take 400 ms (with Wait's default jitter, up to 440 ms).
func ExampleWithoutJitter() {
	api, err := ratelimit.NewGCRA(1, 200*time.Millisecond) // 5 a second, no burst
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	start := time.Now()
	for job := 1; job <= 3; job++ {
		if _, err := ratelimit.Wait(ctx, api, "api", 1, ratelimit.WithoutJitter()); err != nil {
			panic(err)
		}
		fmt.Println("job", job)
	}
	fmt.Println("at least 400 ms:", time.Since(start) >= 400*time.Millisecond)
	// Output:
	// job 1
	// job 2
	// job 3
	// at least 400 ms: true
}

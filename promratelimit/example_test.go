package promratelimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/promratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// A GCRA of 3 a minute reports its decisions; 5 requests, 2 denied, each
// for 20 s. The scrape is what a Prometheus server would read.
func ExampleNewHooks() {
	reg := prometheus.NewRegistry()
	hooks, err := promratelimit.NewHooks(reg)
	if err != nil {
		panic(err)
	}
	limiter, err := ratelimit.NewGCRA(3, time.Minute,
		ratelimit.WithHooks(hooks), ratelimit.WithName("api"),
		ratelimit.WithClock(ratelimittest.NewClock(time.Unix(0, 0))))
	if err != nil {
		panic(err)
	}
	for range 5 {
		_, _ = limiter.Allow(context.Background(), "user:42", 1)
	}

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		panic(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "ratelimit_decisions_total") || strings.HasPrefix(line, "ratelimit_retry_after_seconds_sum") {
			fmt.Println(line)
		}
	}
	// Output:
	// ratelimit_decisions_total{limiter="api",outcome="allowed",source="backend"} 3
	// ratelimit_decisions_total{limiter="api",outcome="denied",source="backend"} 2
	// ratelimit_retry_after_seconds_sum{limiter="api"} 40
}

package outbound_test

import (
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/outbound"
)

// An upstream allows 2 calls a second and says so in its fields; a client
// configured for its documented 10 a second learns the 2 from the first
// answer and the spent quota from the second, and does not send the third
// call at all (it would wait a second, and this client does not wait).
func ExampleTransport() {
	upstreamLimit := ratelimit.Must(ratelimit.NewGCRA(2, time.Second))
	mw := ratelimit.Must(httplimit.NewMiddleware(upstreamLimit, func(*http.Request) (string, error) { return "all", nil }))
	upstream := httptest.NewServer(mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer upstream.Close()

	// readme:begin
	limiter := ratelimit.Must(ratelimit.NewGCRA(10, time.Second, // the upstream's documented 10 a second
		ratelimit.WithPolicyFunc(outbound.LearnedPolicy))) // lowered to what the upstream says
	up := ratelimit.Must(outbound.New(limiter, outbound.Config{MaxWait: -1})) // never wait: fail fast
	client := &http.Client{Transport: &outbound.Transport{Upstream: up}}

	for i := 1; i <= 3; i++ {
		resp, err := client.Get(upstream.URL)
		if errors.Is(err, outbound.ErrLimited) {
			fmt.Printf("call %d: not sent, the upstream's limit is spent\n", i)
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Printf("call %d: %d, RateLimit: %s\n", i, resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	// readme:end

	// Output:
	// call 1: 200, RateLimit: "default";r=1;t=1
	// call 2: 200, RateLimit: "default";r=0;t=1
	// call 3: not sent, the upstream's limit is spent
}

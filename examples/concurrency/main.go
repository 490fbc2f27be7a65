// Command concurrency serves an API of slow jobs, POST /jobs?seconds=3,
// where each API key (the X-API-Key header) may run at most -limit jobs at
// once. A concurrency limiter on Redis holds a lease for each job while it
// runs and gives it back when the job ends, however it ends; a request
// beyond the limit is answered 429 at once, with Retry-After and the
// RateLimit fields of the concurrent-requests quota unit.
//
// With no configuration it starts an embedded Redis (miniredis) in this
// process; with -redis (or REDIS_ADDR) set to a server's host:port it uses
// that server, which other copies of the service may share: each key's
// limit then holds across all of them, and the leases of a copy that dies
// come back by themselves when their TTL (-ttl) passes. It listens on -addr
// and shuts down gracefully on SIGINT or SIGTERM. See README.md for the
// responses.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"time"

	"github.com/ratelimit-go/ratelimit/examples/internal/demoredis"
	"github.com/ratelimit-go/ratelimit/examples/internal/demoserve"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "the address to listen on")
	redisAddr := flag.String("redis", "", "a Redis server's host:port (default: REDIS_ADDR, or else an embedded Redis)")
	limit := flag.Int("limit", 2, "jobs each API key may run at once")
	ttl := flag.Duration("ttl", 30*time.Second, "how long a lease outlives a holder that dies without releasing it")
	flag.Parse()
	if err := run(*addr, *redisAddr, *limit, *ttl); err != nil {
		fmt.Fprintln(os.Stderr, "concurrency:", err)
		os.Exit(1)
	}
}

func run(addr, redisAddr string, limit int, ttl time.Duration) error {
	if ttl <= maxJob {
		return fmt.Errorf("-ttl %v must exceed the longest job, %v, or a running job's lease would expire", ttl, maxJob)
	}
	if redisAddr != "" {
		if err := os.Setenv("REDIS_ADDR", redisAddr); err != nil {
			return err
		}
	}
	rdb, err := demoredis.Open()
	if err != nil {
		return err
	}
	defer rdb.Close()

	limiter, err := newJobLimiter(rdb.Client, limit, ttl)
	if err != nil {
		return err
	}
	h, err := newHandler(limiter, sleep, log.Printf)
	if err != nil {
		return err
	}
	srv := demoserve.NewServer(h)
	srv.WriteTimeout = maxJob + 5*time.Second // a job's answer comes when it ends

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log.Printf("%s", rdb.Describe())
	log.Printf("listening on http://%s/jobs?seconds=3 (X-API-Key: at most %d jobs at once per key, leases of %v)", ln.Addr(), limit, ttl)
	return demoserve.Serve(srv, ln)
}

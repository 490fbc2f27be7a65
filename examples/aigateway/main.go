// Command aigateway serves a small API in the shape of an LLM API, POST
// /v1/chat/completions, that answers a fake completion and limits every API
// key by its plan's requests and tokens a minute, decided together in one
// call to Redis. It runs as a fleet: -replicas copies of the gateway in this
// process, each an HTTP server on a port of its own with its own
// connections to one Redis, as separate processes would.
//
// The plans ("free": 5 requests and 2000 tokens a minute; "pro": 60 and
// 40000) live in one ratelimit.PolicyTable in Redis. PUT /admin/plans/{plan}
// on any replica changes a plan for the whole fleet at once; GET
// /admin/plans shows what a replica decides by.
//
// A request is admitted on an estimate of its tokens (its prompt's tokens
// plus its max_tokens), since the length of the reply is unknown until it
// has been written; the handler then reports the true total and the
// middleware settles the difference, once per request. Answers of
// 500 and above are given back in full.
//
// While Redis does not answer, each replica decides on its share of every
// plan's limits, the limit divided by the replicas alive
// (ratelimit.Fleet.Fallback), so that the fleet as a whole stays near the
// limits.
//
// With no configuration it starts an embedded Redis (miniredis) in this
// process; with REDIS_ADDR set (say 127.0.0.1:6379) it uses that server,
// which other processes of the gateway may share. The replicas listen on
// ADDR (127.0.0.1:8080 by default) and the ports after it. SIGINT or
// SIGTERM stops every replica gracefully. See README.md for the responses.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/ratelimit-go/ratelimit/examples/internal/demoredis"
	"github.com/ratelimit-go/ratelimit/examples/internal/demoserve"
)

const (
	defaultAddr     = "127.0.0.1:8080"
	defaultReplicas = 3
	maxReplicas     = 64
	shutdownTimeout = 10 * time.Second // for the requests in flight
)

func main() {
	replicas := flag.Int("replicas", defaultReplicas, fmt.Sprintf("replicas of the gateway to run, 1 to %d, on ADDR's port and the ports after it", maxReplicas))
	flag.Parse()
	if err := run(*replicas); err != nil {
		fmt.Fprintln(os.Stderr, "aigateway:", err)
		os.Exit(1)
	}
}

func run(replicas int) error {
	if replicas < 1 || replicas > maxReplicas {
		return fmt.Errorf("-replicas must be 1 to %d, not %d", maxReplicas, replicas)
	}
	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = defaultAddr
	}
	host, port, err := splitAddr(addr)
	if err != nil {
		return err
	}
	rdb, err := demoredis.Open()
	if err != nil {
		return err
	}
	defer rdb.Close()
	log.Printf("%s", rdb.Describe())
	// The replicas log Redis's failures themselves, each once (see
	// quietLog), rather than go-redis once per failed dial.
	redis.SetLogger(&logging.VoidLogger{})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var fleet []*replica
	var servers []*http.Server
	var listeners []net.Listener
	defer func() {
		for _, ln := range listeners {
			_ = ln.Close() // those not served yet; closing a served one again is harmless
		}
	}()
	for i := range replicas {
		// Each replica has connections of its own, as a process would.
		client := redis.NewClient(&redis.Options{Addr: rdb.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
		defer client.Close()
		r, err := newReplica(client, replicaConfig{ID: "replica-" + strconv.Itoa(i), Replicas: replicas, Logf: log.Printf})
		if err != nil {
			return err
		}
		startCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err = r.start(startCtx)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", r.id, err)
		}
		p := port
		if p != 0 {
			p += i
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			return err
		}
		fleet, servers, listeners = append(fleet, r), append(servers, demoserve.NewServer(r.handler)), append(listeners, ln)
		log.Printf("%s: listening on http://%s/v1/chat/completions and /admin/plans", r.id, ln.Addr())
	}
	log.Printf("plans (requests and tokens a minute per API key): free %d and %d, pro %d and %d; API keys beginning with %q are on pro",
		defaultPlans()[freePlan].Requests, defaultPlans()[freePlan].Tokens, defaultPlans()[proPlan].Requests, defaultPlans()[proPlan].Tokens, proKeyPrefix)
	return serveFleet(ctx, fleet, servers, listeners)
}

// serveFleet serves each replica's server on its listener and runs its
// loops until ctx ends or a server fails. Then it shuts every server down,
// giving the requests in flight up to shutdownTimeout, stops the loops
// (each replica leaves the fleet) and returns the first server's failure,
// if any.
func serveFleet(ctx context.Context, fleet []*replica, servers []*http.Server, listeners []net.Listener) error {
	loopCtx, stopLoops := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	for _, r := range fleet {
		loops.Add(1)
		go func() { defer loops.Done(); r.run(loopCtx) }()
	}
	served := make(chan error, len(servers))
	for i, srv := range servers {
		go func() { served <- srv.Serve(listeners[i]) }()
	}

	var failure error
	select {
	case failure = <-served:
	case <-ctx.Done():
		log.Printf("shutting down")
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	for _, srv := range servers {
		if err := srv.Shutdown(shutdownCtx); err != nil && failure == nil {
			failure = fmt.Errorf("shutdown: %w", err)
		}
	}
	stopLoops()
	loops.Wait()
	if errors.Is(failure, http.ErrServerClosed) {
		failure = nil
	}
	return failure
}

// splitAddr splits addr, host:port, with port a number from 0 to 65535 (0
// gives every replica a free port).
func splitAddr(addr string) (string, int, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("ADDR %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("ADDR %q: the port must be a number from 0 to 65535", addr)
	}
	return host, port, nil
}

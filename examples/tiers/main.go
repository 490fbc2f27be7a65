// Command tiers serves a small API whose customers are on plans, free (10
// requests a minute), pro (100) and enterprise (1000), and limits each API
// key by its customer's plan with one limiter: a GCRA built
// ratelimit.WithPolicyFunc, which looks the plan up on every request.
//
// The plans and the customers' plans are read from plans.json, shipped in
// the binary, or from the file named by PLANS. POST
// /admin/customers/{key}/plan with {"plan": "pro"} moves a customer to
// another plan while the service runs: its next request is decided by the
// new plan, and what it has used is kept, so a free customer who has used
// all of its 10 has 90 left at once on pro. The admin endpoint has no
// authentication; it is for the demonstration.
//
// A second limit, a burst of 20 requests per client address refilling 5 a
// second, is rolled out in shadow mode (ratelimit.NewShadow, not
// enforcing): it counts every request and logs each one it would have
// denied, and denies none.
//
// The limiters keep their state in this process; with REDIS_ADDR set (say
// 127.0.0.1:6379) they keep it in that Redis server, so several copies of
// the service share each customer's limit. It listens on ADDR,
// 127.0.0.1:8080 by default, and shuts down gracefully on SIGINT or SIGTERM.
// See README.md for the responses.
package main

import (
	_ "embed"
	"fmt"
	"log"
	"net"
	"os"

	"github.com/ratelimit-go/ratelimit/examples/internal/demoredis"
	"github.com/ratelimit-go/ratelimit/examples/internal/demoserve"
)

// defaultPlans is plans.json, used unless PLANS names another file.
//
//go:embed plans.json
var defaultPlans []byte

const defaultAddr = "127.0.0.1:8080"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tiers:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = defaultAddr
	}
	st, source, err := loadPlans(os.Getenv("PLANS"))
	if err != nil {
		return err
	}
	cfg := config{store: st, logf: log.Printf}
	where := "this process"
	if os.Getenv("REDIS_ADDR") != "" {
		rdb, err := demoredis.Open()
		if err != nil {
			return err
		}
		defer rdb.Close()
		cfg.redis, where = rdb.Client, rdb.Describe()
	}
	svc, err := newService(cfg)
	if err != nil {
		return err
	}
	srv := demoserve.NewServer(svc)

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log.Printf("plans from %s: %s (default %s); limits kept in %s", source, st.describe(), st.defaultPlan, where)
	log.Printf("listening on http://%s/v1/hello (admin: POST /admin/customers/{key}/plan)", ln.Addr())

	return demoserve.Serve(srv, ln)
}

// loadPlans reads the plan file at path, or the embedded plans.json when
// path is empty, and says which it read.
func loadPlans(path string) (*store, string, error) {
	if path == "" {
		st, err := parsePlans(defaultPlans)
		return st, "the built-in plans.json", err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	st, err := parsePlans(data)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return st, path, nil
}

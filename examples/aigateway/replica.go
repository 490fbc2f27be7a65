package main

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

// How each replica uses Redis, and behaves when it does not answer.
const (
	limiterTimeout  = 250 * time.Millisecond // the most one decision may wait for Redis
	breakerFailures = 3                      // failed decisions in a row that stop asking Redis
	breakerCoolDown = 5 * time.Second        // how long until Redis is asked again

	fleetName      = "ratelimit:fleet:aigateway" // the fleet's membership in Redis
	tableName      = "aigateway-plans"           // the plans' PolicyTable
	heartbeat      = time.Second                 // a replica's heartbeat; gone replicas drop out within 4 s
	tableRefresh   = 5 * time.Second             // the plans' safety-net refresh
	repeatLogAfter = 30 * time.Second            // an error repeated within this is logged once
)

// replicaConfig configures one replica of the gateway.
type replicaConfig struct {
	// ID names the replica in the fleet, unique among its replicas.
	ID string
	// Replicas is the fleet's usual size: the number of replicas the
	// fallbacks share their limits by until a heartbeat has answered.
	Replicas int
	// Logf receives the replica's failures: its limiter's, its plans', its
	// heartbeats' (each repeated error once in repeatLogAfter).
	Logf func(format string, args ...any)
}

// replica is one replica of the gateway: its own Redis connections, its
// copy of the plans, its membership of the fleet, and its handler.
type replica struct {
	id      string
	table   *ratelimit.PolicyTable
	fleet   *ratelimit.Fleet
	handler http.Handler
	logf    func(format string, args ...any)
}

// newReplica returns a replica on client, which it uses alone (its own
// connections to the fleet's Redis). It talks to Redis only from start on.
func newReplica(client *redis.Client, cfg replicaConfig) (*replica, error) {
	r := &replica{id: cfg.ID, logf: cfg.Logf}
	tableErrs := newQuietLog(cfg.Logf, cfg.ID+": plans")
	var err error
	r.table, err = ratelimit.NewPolicyTable(client, ratelimit.PolicyTableConfig{
		Name:    tableName,
		Refresh: tableRefresh,
		OnError: func(err error) {
			if errors.Is(err, ratelimit.ErrTableMissing) {
				// Redis lost the plans: put this replica's copy back.
				ctx, cancel := context.WithTimeout(context.Background(), tableRefresh)
				defer cancel()
				if err := seedPlans(ctx, r.table); err != nil {
					tableErrs.report(err)
				}
				return
			}
			tableErrs.report(err)
		},
	})
	if err != nil {
		return nil, err
	}
	r.fleet, err = ratelimit.NewFleet(client, ratelimit.FleetConfig{
		Name:      fleetName,
		ID:        cfg.ID,
		Heartbeat: heartbeat,
		Assume:    cfg.Replicas,
		OnError:   newQuietLog(cfg.Logf, cfg.ID+": heartbeat").report,
	})
	if err != nil {
		return nil, err
	}
	limiter, err := r.newLimiter(client)
	if err != nil {
		return nil, err
	}
	limit, err := httplimit.NewMiddleware(limiter, callKey,
		httplimit.WithCost(estimate),
		httplimit.WithSettle(),
		httplimit.WithRefund(func(_ *http.Request, status int) bool { return status >= 500 }),
		httplimit.WithDecisionContext(),
		httplimit.WithOnError(func(req *http.Request, err error) {
			r.logf("%s: rate limiter: %s %s: %v", r.id, req.Method, req.URL.Path, err)
		}))
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/chat/completions", withChatRequest(limit.Handler(http.HandlerFunc(complete))))
	r.adminRoutes(mux)
	r.handler = mux
	return r, nil
}

// newLimiter returns the limiter of every API key: a Composite of the
// plan's requests and tokens a minute, decided in one script call on Redis,
// in a Guard that fails over to this replica's share of both.
//
// Each part reads its limit from the plans' table, by the plan of the
// request's API key; the constructors' numbers are the free plan's, for a
// call that has no plan. While Redis does not answer (250 ms per decision,
// and after 3 failures in a row not asked for 5 s), the Guard decides on
// the fleet's fallback: the same two limits, in process, each at the plan's
// limit divided by the replicas alive, so that the fleet as a whole stays
// near each plan's limit.
func (r *replica) newLimiter(client redis.Scripter) (*ratelimit.Guard, error) {
	free := defaultPlans()[freePlan]
	requests, err := ratelimit.NewRedisGCRA(client, free.Requests, planWindow,
		ratelimit.WithPolicyFunc(partPolicy(r.table, requestsPart)))
	if err != nil {
		return nil, err
	}
	tokens, err := ratelimit.NewRedisTokenBucket(client, ratelimit.Per(free.Tokens, planWindow), free.Tokens,
		ratelimit.WithPolicyFunc(partPolicy(r.table, tokensPart)))
	if err != nil {
		return nil, err
	}
	both, err := ratelimit.NewComposite(
		// Each call takes 1 from "requests", whatever its cost in tokens.
		ratelimit.Part{Name: requestsPart, Limiter: requests, PerCall: true},
		ratelimit.Part{Name: tokensPart, Limiter: tokens},
	)
	if err != nil {
		return nil, err
	}
	fallback, err := r.fleet.Fallback(both)
	if err != nil {
		return nil, err
	}
	breaker, err := ratelimit.NewBreaker(ratelimit.BreakerConfig{
		Failures: breakerFailures,
		CoolDown: breakerCoolDown,
		Hooks:    breakerLog{id: r.id, logf: r.logf},
	})
	if err != nil {
		return nil, err
	}
	return ratelimit.NewGuard(both, ratelimit.GuardConfig{
		Timeout:   limiterTimeout,
		OnFailure: ratelimit.FailOver,
		Fallback:  fallback,
		Breaker:   breaker,
	})
}

// start makes the replica ready to serve: it seeds the plans if Redis
// holds none, reads them, and joins the fleet. Run it before serving; then
// run keeps both up to date.
func (r *replica) start(ctx context.Context) error {
	if err := seedPlans(ctx, r.table); err != nil {
		return err
	}
	if err := r.table.Load(ctx); err != nil {
		return err
	}
	return r.fleet.Beat(ctx)
}

// run follows the plans and beats the fleet's heartbeat until ctx ends,
// and then leaves the fleet; it returns once both loops have returned.
func (r *replica) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = r.table.Run(ctx) }()
	go func() { defer wg.Done(); _ = r.fleet.Run(ctx) }()
	wg.Wait()
}

// breakerLog is the Hooks of a replica's Breaker: it logs its changes.
type breakerLog struct {
	ratelimit.NopHooks
	id   string
	logf func(format string, args ...any)
}

// BreakerChanged logs a change of the circuit breaker.
func (b breakerLog) BreakerChanged(from, to ratelimit.BreakerState) {
	b.logf("%s: rate limiter circuit breaker: %v -> %v", b.id, from, to)
}

// quietLog logs the errors of a loop that reports one a second while Redis
// is down: an error the same as the previous one is logged again only after
// repeatLogAfter. It is safe for concurrent use.
type quietLog struct {
	logf   func(format string, args ...any)
	prefix string

	mu     sync.Mutex
	last   string
	logged time.Time
}

// newQuietLog returns a quietLog that logs to logf, each line after prefix.
func newQuietLog(logf func(format string, args ...any), prefix string) *quietLog {
	return &quietLog{logf: logf, prefix: prefix}
}

// report logs err unless it repeats the previous error within repeatLogAfter.
func (q *quietLog) report(err error) {
	msg := err.Error()
	now := time.Now()
	q.mu.Lock()
	repeat := msg == q.last && now.Sub(q.logged) < repeatLogAfter
	if !repeat {
		q.last, q.logged = msg, now
	}
	q.mu.Unlock()
	if !repeat {
		q.logf("%s: %v", q.prefix, err)
	}
}

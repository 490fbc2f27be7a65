package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

// The per-IP burst limit, rolled out in shadow mode: 20 requests at once
// from one address, refilling 5 a second (full again 4 s after it is
// exhausted).
const (
	ipBurst = 20
	ipRate  = 5 // requests per second

	maxAPIKey    = 200  // bytes
	maxAdminBody = 1024 // bytes
)

// Errors of apiKey, answered 401.
var (
	errNoAPIKey      = errors.New("an API key is required: send Authorization: Bearer <key> or X-API-Key: <key>")
	errUnknownAPIKey = errors.New("the API key is not a customer's")
)

// config is what newService needs.
type config struct {
	// store holds the plans and the customers' plans.
	store *store
	// redis, when not nil, keeps the limiters' state in Redis, shared by
	// every copy of the service; nil keeps it in this process.
	redis redis.Scripter
	// clock is the in-process limiters' clock; nil means the system
	// clock. Tests move a ratelimittest.Clock.
	clock ratelimit.Clock
	// logf receives the shadow limit's would-be denials and the limiters'
	// errors.
	logf func(format string, args ...any)
}

// service is the HTTP service: the API behind the plan limit and the
// shadowed per-IP limit, and the admin endpoint that changes plans.
type service struct {
	store  *store
	plans  ratelimit.Limiter // per API key, by the customer's plan
	perIP  *ratelimit.Shadow // per client address, not enforced
	ipKey  httplimit.KeyFunc
	logf   func(format string, args ...any)
	routes *http.ServeMux
}

// newService returns the service of cfg.
func newService(cfg config) (*service, error) {
	s := &service{store: cfg.store, logf: cfg.logf}
	var err error
	if s.plans, err = newPlanLimiter(cfg); err != nil {
		return nil, err
	}
	if s.perIP, err = newIPShadow(cfg); err != nil {
		return nil, err
	}
	if s.ipKey, err = httplimit.KeyByIP(httplimit.IPConfig{}); err != nil {
		return nil, err
	}
	limit, err := httplimit.NewMiddleware(s.plans, s.apiKey,
		httplimit.WithKeyErrorHandler(unauthorized),
		httplimit.WithOnError(func(r *http.Request, err error) {
			// Fail open: an outage of the limiter is not an outage
			// of the API. But say so.
			s.logf("plan limit failed, letting %s %s through: %v", r.Method, r.URL.Path, err)
		}))
	if err != nil {
		return nil, err
	}
	s.routes = http.NewServeMux()
	s.routes.Handle("GET /v1/hello", s.shadowIP(limit.Handler(http.HandlerFunc(s.hello))))
	s.routes.HandleFunc("POST /admin/customers/{key}/plan", s.setPlan)
	return s, nil
}

// ServeHTTP serves the API and the admin endpoint.
func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.routes.ServeHTTP(w, r) }

// newPlanLimiter returns the limiter of the plans: a GCRA whose policy is
// chosen per API key, by the customer's plan, when each request is decided.
// Its own policy, the constructor's, is the default plan's.
func newPlanLimiter(cfg config) (ratelimit.Limiter, error) {
	def := cfg.store.defaultPolicy()
	byPlan := ratelimit.WithPolicyFunc(cfg.store.policy)
	if cfg.redis != nil {
		return ratelimit.NewRedisGCRA(cfg.redis, def.Limit, def.Window, byPlan, ratelimit.WithName("plans"))
	}
	opts := []ratelimit.Option{byPlan, ratelimit.WithName("plans")}
	if cfg.clock != nil {
		opts = append(opts, ratelimit.WithClock(cfg.clock))
	}
	return ratelimit.NewGCRA(def.Limit, def.Window, opts...)
}

// newIPShadow returns the per-IP burst limit in a Shadow that does not
// enforce it: every request is counted as if it were, and the Shadow's
// hooks log each one it would have denied.
func newIPShadow(cfg config) (*ratelimit.Shadow, error) {
	var bucket ratelimit.Limiter
	var err error
	// Client addresses are no secret: the log names them whole (the
	// limiters show keys as digests by default).
	if cfg.redis != nil {
		bucket, err = ratelimit.NewRedisTokenBucket(cfg.redis, ratelimit.PerSecond(ipRate), ipBurst, ratelimit.WithKeysShown())
	} else {
		opts := []ratelimit.Option{ratelimit.WithKeysShown()}
		if cfg.clock != nil {
			opts = append(opts, ratelimit.WithClock(cfg.clock))
		}
		bucket, err = ratelimit.NewTokenBucket(ratelimit.PerSecond(ipRate), ipBurst, opts...)
	}
	if err != nil {
		return nil, err
	}
	return ratelimit.NewShadow(bucket, ratelimit.ShadowConfig{
		Enforce: false, // shadow mode: count, log, never deny
		Hooks:   shadowLog(cfg.logf),
		Name:    "per-ip",
		Clock:   cfg.clock,
	})
}

// shadowLog is the per-IP Shadow's Hooks: it logs one line for each request
// the limit would have denied, had it been enforced.
type shadowLog func(format string, args ...any)

// Decided logs a denial the Shadow let through, and an error. The caller
// got the allowed Result; the denial the limit would have answered is in
// Enforced.
func (logf shadowLog) Decided(ev ratelimit.Event) {
	switch {
	case ev.Err != nil:
		logf("shadow: %s limit failed for %s: %v", ev.Limiter, ev.Key, ev.Err)
	case ev.WouldDeny:
		logf("shadow: would deny %s: %s limit of %d per %v exhausted, retry in %v",
			ev.Key, ev.Limiter, ev.Policy.Limit, ev.Policy.Window, ev.Enforced.RetryAfter.Round(time.Millisecond))
	}
}

// BreakerChanged does nothing: the Shadow has no breaker.
func (shadowLog) BreakerChanged(from, to ratelimit.BreakerState) {}

// shadowIP counts every request against its client address's burst limit,
// through the Shadow, before passing it to next. While the Shadow does not
// enforce, it allows every request, and its hooks log the ones it would have
// denied; so the result is not needed here. (To enforce the limit, give the
// Shadow to an httplimit.Middleware and call SetEnforce(true).)
func (s *service) shadowIP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ip, err := s.ipKey(r); err == nil {
			// An error is logged by the hooks; the request goes on.
			_, _ = s.perIP.Allow(r.Context(), ip, 1)
		}
		next.ServeHTTP(w, r)
	})
}

// apiKey is the plan limit's KeyFunc: the API key of a request, from
// Authorization: Bearer <key> or else X-API-Key, which must be a
// customer's.
func (s *service) apiKey(r *http.Request) (string, error) {
	key := sentKey(r)
	if key == "" || len(key) > maxAPIKey {
		return "", errNoAPIKey
	}
	if _, ok := s.store.planOf(key); !ok {
		return "", errUnknownAPIKey
	}
	return key, nil
}

// sentKey returns the API key r sends, from Authorization: Bearer <key> or
// else X-API-Key, unchecked; "" when it sends none.
func sentKey(r *http.Request) string {
	if key := bearer(r.Header.Get("Authorization")); key != "" {
		return key
	}
	return r.Header.Get("X-API-Key")
}

// bearer returns the token of an Authorization value of the Bearer scheme,
// or "".
func bearer(authorization string) string {
	scheme, token, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// unauthorized answers a request without a customer's API key: 401.
func unauthorized(w http.ResponseWriter, _ *http.Request, err error) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="tiers"`)
	writeProblem(w, http.StatusUnauthorized, err.Error())
}

// hello is the API: it answers the caller's plan and its limit. The plan
// limit's KeyFunc, apiKey, has let only a customer's API key this far, and
// customers are never removed, so the key sent has a plan.
func (s *service) hello(w http.ResponseWriter, r *http.Request) {
	plan, _ := s.store.planOf(sentKey(r))
	p := s.store.plans[plan]
	writeJSON(w, http.StatusOK, map[string]any{
		"plan":    plan,
		"limit":   p.Limit,
		"window":  p.Window.String(),
		"message": "hello from the API",
	})
}

// planChange is the body of a request to the admin endpoint.
type planChange struct {
	Plan string `json:"plan"`
}

// setPlan is the admin endpoint, POST /admin/customers/{key}/plan with a
// body such as {"plan": "pro"}: it puts the customer on the plan, from its
// next request on, keeping what it has used. It answers 400 for a body
// that is not such an object or names no plan or an unknown one, 404 for
// an unknown customer, and 413 for a body over maxAdminBody bytes.
//
// It has no authentication: it is for the demonstration. A real service
// serves it on an internal listener, behind its own authentication.
func (s *service) setPlan(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAdminBody))
	dec.DisallowUnknownFields()
	var body planChange
	err := dec.Decode(&body)
	if err == nil && dec.Decode(&struct{}{}) != io.EOF {
		err = errors.New("more than one JSON value")
	}
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeProblem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body must be at most %d bytes", maxAdminBody))
		return
	case errors.Is(err, io.EOF):
		writeProblem(w, http.StatusBadRequest, fmt.Sprintf(`the body is empty: send {"plan": "<name>"}, one of %s`, s.store.planList()))
		return
	case err != nil:
		writeProblem(w, http.StatusBadRequest, fmt.Sprintf(`the body must be one JSON object such as {"plan": "pro"}: %v`, err))
		return
	case body.Plan == "":
		writeProblem(w, http.StatusBadRequest, fmt.Sprintf(`the body names no plan: send {"plan": "<name>"}, one of %s`, s.store.planList()))
		return
	}
	previous, err := s.store.setPlan(key, body.Plan)
	switch {
	case errors.Is(err, errUnknownPlan):
		writeProblem(w, http.StatusBadRequest, err.Error())
		return
	case errors.Is(err, errUnknownCustomer):
		writeProblem(w, http.StatusNotFound, err.Error())
		return
	case err != nil:
		writeProblem(w, http.StatusInternalServerError, err.Error())
		return
	}
	p := s.store.plans[body.Plan]
	s.logf("admin: customer %s moved from plan %s to %s (%d per %v)", key, previous, body.Plan, p.Limit, p.Window)
	writeJSON(w, http.StatusOK, map[string]any{
		"customer": key,
		"plan":     body.Plan,
		"previous": previous,
		"limit":    p.Limit,
		"window":   p.Window.String(),
	})
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	write(w, status, "application/json", v)
}

// writeProblem answers an RFC 9457 problem document of status with detail.
func writeProblem(w http.ResponseWriter, status int, detail string) {
	write(w, status, "application/problem+json", map[string]any{
		"type":   "about:blank",
		"title":  http.StatusText(status),
		"status": status,
		"detail": detail,
	})
}

// write answers v as JSON of contentType with status, with < and > as
// they are: the answers are not HTML.
func write(w http.ResponseWriter, status int, contentType string, v any) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

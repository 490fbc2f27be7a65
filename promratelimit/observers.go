package promratelimit

import (
	"context"
	"net/http"

	"github.com/ratelimit-go/ratelimit"
)

// Pattern returns r.Pattern, the pattern of the http.ServeMux route that
// matched r (Go 1.22 and later): a bounded route label, set once a mux has
// routed r. It is "" for a request that a Middleware sees before the mux
// routes it (a Middleware wrapping the whole mux): wrap each route's
// handler instead, or read the route from your router.
func Pattern(r *http.Request) string { return r.Pattern }

// HTTPObserver returns an observer for httplimit.WithObserver (it is an
// httplimit.Observer): for each request the Middleware decides, it calls
// Observe with route(r) as the route label, the Decision and the error.
// A nil route is Pattern. route must return few distinct values (a route's
// pattern, a tenant's plan), never the path or anything a client chooses:
// past WithMaxRoutes, routes are counted as OtherRoute.
//
//	mw, err := httplimit.NewMiddleware(limiter, httplimit.KeyByBearer(),
//		httplimit.WithObserver(hooks.HTTPObserver(nil)))
//	mux.Handle("GET /search", mw.Handler(search))
func (h *Hooks) HTTPObserver(route func(*http.Request) string) func(*http.Request, ratelimit.Decision, error) {
	if h.off() {
		return func(*http.Request, ratelimit.Decision, error) {}
	}
	if route == nil {
		route = Pattern
	}
	return func(r *http.Request, d ratelimit.Decision, err error) {
		h.Observe(route(r), d, err)
	}
}

// GRPCObserver returns an observer for grpclimit.WithObserver (it is a
// grpclimit.Observer): for each call the interceptor decides, it calls
// Observe with the full method name ("/pkg.Service/Method") as the route
// label, the Decision and the error. A server routes only the methods it
// registered to its interceptors, so the routes are bounded by its
// services.
func (h *Hooks) GRPCObserver() func(ctx context.Context, fullMethod string, d ratelimit.Decision, err error) {
	if h.off() {
		return func(context.Context, string, ratelimit.Decision, error) {}
	}
	return func(_ context.Context, fullMethod string, d ratelimit.Decision, err error) {
		h.Observe(fullMethod, d, err)
	}
}

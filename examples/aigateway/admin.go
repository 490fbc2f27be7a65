package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"

	"github.com/ratelimit-go/ratelimit"
)

// maxAdminBody bounds the body of PUT /admin/plans/{plan}, in bytes.
const maxAdminBody = 1 << 10

// adminRoutes adds the plans' admin endpoints to mux. They have no
// authentication of their own: the gateway listens on 127.0.0.1 only, and a
// gateway facing clients would serve them on an internal listener, behind
// its operators' authentication.
//
//	GET /admin/plans         the plans as this replica sees them, and the fleet
//	PUT /admin/plans/{plan}  {"requests": N, "tokens": M}: the plan's limits a
//	                         minute, for every replica
func (r *replica) adminRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /admin/plans", r.showPlans)
	mux.HandleFunc("PUT /admin/plans/{plan}", r.putPlan)
}

// replicaView is the answer of GET /admin/plans.
type replicaView struct {
	Replica string `json:"replica"`
	// Live is the number of replicas alive, as the latest heartbeat
	// that answered counted them.
	Live int `json:"live"`
	// Version is the version of the replica's copy of the plans.
	Version int64                 `json:"version"`
	Plans   map[string]planLimits `json:"plans"`
}

// showPlans answers GET /admin/plans: what this replica decides by.
func (r *replica) showPlans(w http.ResponseWriter, _ *http.Request) {
	byPlan, _ := tablePlans(r.table)
	writeJSON(w, http.StatusOK, replicaView{Replica: r.id, Live: r.fleet.Live(), Version: r.table.Version(), Plans: byPlan})
}

// putPlan answers PUT /admin/plans/{plan}: it writes the plan's limits to
// the table in Redis, and every replica, this one included, follows within
// a round trip. 404 for a plan that does not exist, 400 for a body that is
// not two limits of 1 to maxPlanLimit, 503 when Redis fails or has lost
// the table (which the replicas then put back).
func (r *replica) putPlan(w http.ResponseWriter, req *http.Request) {
	plan := req.PathValue("plan")
	if !slices.Contains(plans, plan) {
		writeProblem(w, http.StatusNotFound, fmt.Sprintf("no plan %q: the plans are %q", plan, plans))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxAdminBody))
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	var l planLimits
	if err := json.Unmarshal(body, &l); err != nil {
		writeProblem(w, http.StatusBadRequest, `the body must be {"requests": N, "tokens": M}: `+err.Error())
		return
	}
	if err := l.check(); err != nil {
		writeProblem(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := setPlan(req.Context(), r.table, plan, l); err != nil {
		status := http.StatusServiceUnavailable
		if errors.Is(err, ratelimit.ErrInvalidConfig) {
			status = http.StatusBadRequest
		}
		r.logf("%s: setting plan %s: %v", r.id, plan, err)
		writeProblem(w, status, "the plan was not written: "+err.Error())
		return
	}
	r.logf("%s: plan %s set to %d requests and %d tokens a minute", r.id, plan, l.Requests, l.Tokens)
	writeJSON(w, http.StatusOK, map[string]any{"plan": plan, "requests": l.Requests, "tokens": l.Tokens})
}

// writeJSON answers with status and v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

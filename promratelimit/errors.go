package promratelimit

import (
	"context"
	"errors"

	"github.com/ratelimit-go/ratelimit"
)

// opDecide is the op label of a decision's error.
const opDecide = "decide"

// errorTypes are the values errorType returns.
var errorTypes = [...]string{
	"invalid_cost", "cost_exceeds_limit", "corrupt_state", "invalid_config", "invalid_key",
	"lease_expired", "canceled", "deadline_exceeded", "backend", "other",
}

// errorType returns the error_type label of err: "invalid_cost",
// "cost_exceeds_limit", "corrupt_state", "invalid_config", "invalid_key",
// "lease_expired", "canceled", "deadline_exceeded", "backend" (any other
// ratelimit.ErrBackend) or "other".
func errorType(err error) string {
	switch {
	case errors.Is(err, ratelimit.ErrInvalidCost):
		return "invalid_cost"
	case errors.Is(err, ratelimit.ErrCostExceedsLimit):
		return "cost_exceeds_limit"
	case errors.Is(err, ratelimit.ErrCorruptState):
		return "corrupt_state"
	case errors.Is(err, ratelimit.ErrInvalidConfig):
		return "invalid_config"
	case errors.Is(err, ratelimit.ErrInvalidKey):
		return "invalid_key"
	case errors.Is(err, ratelimit.ErrLeaseExpired):
		return "lease_expired"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	case errors.Is(err, ratelimit.ErrBackend):
		return "backend"
	}
	return "other"
}

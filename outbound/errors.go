package outbound

import (
	"errors"
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// ErrLimited is wrapped by the error of a call that was not sent because
// it would have had to wait longer than allowed: past Config.MaxWait, or
// past its context's deadline (then the error wraps
// context.DeadlineExceeded too), for the limiter's next unit or for the end
// of a pause an upstream asked for. Nothing failed: the budget is spent for
// now. Such a call took nothing and was not sent.
var ErrLimited = errors.New("outbound: the upstream's limit allows no call within the wait allowed")

// errNilStore is the error of a method called on a nil or zero-value store.
var errNilStore = fmt.Errorf("%w: outbound: a nil or zero-value store; build one with NewMemoryStore or NewRedisStore", ratelimit.ErrInvalidConfig)

// errPauseNotPositive is the error of a Store's Pause given d <= 0.
func errPauseNotPositive(d time.Duration) error {
	return fmt.Errorf("%w: outbound: a pause of %v; it must be > 0", ratelimit.ErrInvalidConfig, d)
}

// errKeepNotPositive is the error of a Store's Learn given keep <= 0.
func errKeepNotPositive(keep time.Duration) error {
	return fmt.Errorf("%w: outbound: a policy kept for %v; it must be > 0", ratelimit.ErrInvalidConfig, keep)
}

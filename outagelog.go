package ratelimit

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// outageQuiet is how long a backend must go without a failure before the
// end of its outage is logged: a Guard (and a Fleet's or a PolicyTable's
// Run) logs the first failure of an outage at once, at Warn, and its end
// at Info on the first answer at least outageQuiet after the outage's
// latest failure. So a
// backend that fails now and then, or flaps, gives at most one pair of
// lines per outageQuiet, each end line counting what the outage cost.
const outageQuiet = 10 * time.Second

// outageLog logs the outages of one backend through log/slog: a line at
// Warn when one starts, and one at Info when it ends (see outageQuiet),
// never one per failure. Its lines name who logs them and the error, never
// a key (this package's errors show keys as digests unless the limiter was
// built WithKeysShown). It is safe for concurrent use; while the backend
// answers, a call costs one atomic load, and for outageQuiet after an
// outage's latest failure a clock read and two atomic loads, never a lock
// but for the one call that logs the end.
type outageLog struct {
	logger *slog.Logger // nil: slog.Default() when a line is logged
	base   clockBase
	// failingMsg and backMsg are the lines' messages; attrs name who logs
	// them; counted names the end line's count of failures.
	failingMsg, backMsg, counted string
	attrs                        []slog.Attr

	failing  atomic.Bool
	noted    atomic.Bool  // once has logged in this outage
	count    atomic.Int64 // failures in the outage so far
	lastFail atomic.Int64 // on base: the outage's latest failure
	mu       sync.Mutex   // held while an outage starts or ends
	started  int64        // on base: the outage's first failure; under mu
}

// newOutageLog returns the outageLog of a backend on clock, logging to
// logger (nil: slog.Default()) the messages failing and back, with attrs;
// the end line counts the outage's failures under the name counted.
func newOutageLog(logger *slog.Logger, clock Clock, failing, back, counted string, attrs ...slog.Attr) *outageLog {
	return &outageLog{logger: logger, base: newClockBase(clock), failingMsg: failing, backMsg: back, counted: counted, attrs: attrs}
}

// failed notes a failure, err, and logs it at Warn when it starts an
// outage, with extra.
func (o *outageLog) failed(err error, extra ...slog.Attr) {
	// Stored before failing is read, so that an end racing this failure
	// sees it (see ok).
	o.lastFail.Store(o.base.elapsed())
	o.count.Add(1)
	if o.failing.Load() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failing.Load() {
		return
	}
	o.started = o.lastFail.Load()
	o.noted.Store(false)
	o.failing.Store(true)
	attrs := append(append([]slog.Attr{}, extra...), slog.Any("error", err))
	o.log(slog.LevelWarn, o.failingMsg, attrs...)
}

// ok notes an answer of the backend, and logs the end of the outage at Info
// when it is outageQuiet past the outage's latest failure.
func (o *outageLog) ok() {
	if !o.failing.Load() {
		return
	}
	// Checked before the lock too, so that the answers of a backend back
	// from an outage do not queue on one mutex for outageQuiet.
	now := o.base.elapsed()
	if now-o.lastFail.Load() < int64(outageQuiet) {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.count.Load()
	if !o.failing.Load() || now-o.lastFail.Load() < int64(outageQuiet) {
		return
	}
	o.failing.Store(false)
	if o.count.Load() != n {
		// A failure came in between: the outage goes on.
		o.failing.Store(true)
		return
	}
	o.count.Add(-n)
	// The outage is timed from its first failure to its latest.
	o.log(slog.LevelInfo, o.backMsg,
		slog.Duration("outage", time.Duration(o.lastFail.Load()-o.started)), slog.Int64(o.counted, n))
}

// once logs msg at level, with attrs, the first time it is called in an
// outage; never outside one.
func (o *outageLog) once(level slog.Level, msg string, attrs ...slog.Attr) {
	if o.failing.Load() && !o.noted.Swap(true) {
		o.log(level, msg, attrs...)
	}
}

// log logs one line at level.
func (o *outageLog) log(level slog.Level, msg string, attrs ...slog.Attr) {
	logger := o.logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.LogAttrs(context.Background(), level, msg, append(append([]slog.Attr{}, o.attrs...), attrs...)...)
}

// tableOutageLog returns the outageLog of the reads of Run of the table
// name, on clock.
func tableOutageLog(logger *slog.Logger, clock Clock, name string) *outageLog {
	return newOutageLog(logger, clock,
		"ratelimit: policy table reads failing; deciding on the last copy read",
		"ratelimit: policy table reads answering again", "failed_reads",
		slog.String("table", name))
}

// Package errlog logs the limiter errors that httplimit and grpclimit
// would otherwise swallow, at most one line per Interval, so that an
// outage (Redis down) is seen without flooding the log.
package errlog

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// Interval is the least time between two lines of one Logger: errors in
// between are counted, and the next line written (at the next error after
// Interval) gives their number as "suppressed".
const Interval = 10 * time.Second

// Logger logs errors at slog.LevelWarn, at most one line per Interval.
// It is safe for concurrent use; the zero value is not usable (see New).
type Logger struct {
	log  *slog.Logger // nil: slog.Default() when a line is written
	now  func() time.Time
	msg  string
	next atomic.Int64 // Unix nanoseconds before which no line is written
	// suppressed counts the errors not logged since the last line (one
	// suppressed while a line is being written may count in it).
	suppressed atomic.Int64
}

// New returns a Logger writing msg to log, or to slog.Default() (read at
// each line, so that a later slog.SetDefault is followed) when log is nil,
// on the time now gives.
func New(log *slog.Logger, msg string, now func() time.Time) *Logger {
	return &Logger{log: log, msg: msg, now: now}
}

// Log writes err with attrs, unless a line was written less than Interval
// ago: then it counts err as suppressed. attrs must never hold a key or a
// credential.
func (l *Logger) Log(ctx context.Context, err error, attrs ...slog.Attr) {
	now := l.now().UnixNano()
	next := l.next.Load()
	if now < next || !l.next.CompareAndSwap(next, now+int64(Interval)) {
		l.suppressed.Add(1)
		return
	}
	log := l.log
	if log == nil {
		log = slog.Default()
	}
	all := make([]slog.Attr, 0, len(attrs)+2)
	all = append(all, slog.Any("error", err))
	all = append(all, attrs...)
	if n := l.suppressed.Swap(0); n > 0 {
		all = append(all, slog.Int64("suppressed", n))
	}
	log.LogAttrs(ctx, slog.LevelWarn, l.msg, all...)
}

package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Run keeps the replica's copy of the table up to date until ctx ends, and
// returns ctx's error then; call it on a goroutine of its own, once per
// table (a second Run at the same time returns an error wrapping
// ErrInvalidConfig at once).
//
// It subscribes to the table's channel, then reads what changed (so that
// no change falls between the two). A notice on the channel is a hint and
// nothing more: Run then asks Redis, with one call of a read-only script,
// for the fields that changed since its copy's version, and installs what
// the HASH holds now, checked as Load checks it (copying the map a change
// touches: tens of milliseconds and 5 MB per 100,000 keys). It reads the
// whole table (one HGETALL) only when the changes since its version are
// more than the 64 the table logs, or the table was written whole
// (Replace, Seed).
//
// Its reads are bounded in rate whatever arrives on the channel: at most
// one script call per MinSync, the notices that arrive meanwhile answered
// together by the next one, and at most one HGETALL per MinReload (see
// PolicyTableConfig). A notice that is not the table's (forged, garbage)
// costs at most its share of one script call, which finds nothing to
// change, and never a read of the whole table.
//
// Every Refresh it asks the same of Redis, and pings its subscription; a
// subscription that answered nothing within Refresh is dropped. After a
// lost connection (a restart, a failover), it subscribes again, retrying
// at most every second, and asks again once subscribed. It keeps the last
// copy it read meanwhile, and when the table is missing (see PolicyTable).
// Errors go to OnError; Run goes on.
func (t *PolicyTable) Run(ctx context.Context) error {
	if t == nil {
		return notBuilt("PolicyTable")
	}
	if ctx == nil {
		return fmt.Errorf("ratelimit: PolicyTable: %w", errNilContext)
	}
	if !t.running.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: PolicyTable %q: Run is already running", ErrInvalidConfig, t.name)
	}
	defer t.running.Store(false)
	reads := &tableReads{minSync: t.minSync, minReload: t.minReload}
	backoff := t.firstBackoff()
	for {
		subscribed, err := t.follow(ctx, reads)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if subscribed {
			backoff = t.firstBackoff()
		}
		t.report(ctx, err)
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
		backoff = min(2*backoff, time.Second, t.refresh)
	}
}

// firstBackoff is the wait before Run subscribes again after its first
// failure; it doubles with each failure after, up to a second (or Refresh).
func (t *PolicyTable) firstBackoff() time.Duration { return min(50*time.Millisecond, t.refresh) }

// tableReads bounds the reads of Run: it remembers which read is wanted
// and when the last ones were made, and says when the next may be. Its
// zero times mean never. It is Run's alone.
type tableReads struct {
	minSync, minReload   time.Duration
	syncWanted           bool // a notice, a refresh or a subscription asks what changed
	reloadWanted         bool // the table must be read whole
	lastSync, lastReload time.Time
}

// next returns when the read that is wanted may be made, and whether one
// is wanted. A wanted reload stands for any sync: until it is made, the
// copy's version is one the table's log no longer reaches.
func (r *tableReads) next() (time.Time, bool) {
	switch {
	case r.reloadWanted:
		return r.lastReload.Add(r.minReload), true
	case r.syncWanted:
		return r.lastSync.Add(r.minSync), true
	}
	return time.Time{}, false
}

// read makes the read that is wanted, as of now, which must not be before
// next's time: a reload, or a sync, which may find that a reload is
// wanted, made at once if MinReload allows it.
func (t *PolicyTable) read(ctx context.Context, r *tableReads, now time.Time) error {
	if !r.reloadWanted {
		r.syncWanted, r.lastSync = false, now
		reload, err := t.sync(ctx)
		if !reload {
			return err
		}
		r.reloadWanted = true
		if now.Before(r.lastReload.Add(r.minReload)) {
			return nil
		}
	}
	r.reloadWanted, r.syncWanted, r.lastReload = false, false, now
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.load(ctx)
}

// follow is one subscription of Run: it returns when the subscription
// fails, with its error, and whether it was ever confirmed.
func (t *PolicyTable) follow(ctx context.Context, reads *tableReads) (subscribed bool, _ error) {
	ps := t.client.Subscribe(ctx, t.key)
	defer func() { _ = ps.Close() }()
	// A read blocked on the connection ends when ps is closed.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()

	refreshAt := time.Now().Add(t.refresh)
	pinged := false // a ping is unanswered, and nothing came since
	for {
		now := time.Now()
		if !now.Before(refreshAt) {
			if pinged {
				return subscribed, fmt.Errorf("ratelimit: PolicyTable %q: %w: the subscription answered nothing within %v", t.name, ErrBackend, t.refresh)
			}
			reads.syncWanted = true
			if err := ps.Ping(ctx); err != nil {
				return subscribed, t.redisErr("ping", err)
			}
			pinged = true
			refreshAt = now.Add(t.refresh)
		}
		at, wanted := reads.next()
		if wanted && !now.Before(at) {
			t.report(ctx, t.bounded(ctx, func(ctx context.Context) error { return t.read(ctx, reads, now) }))
			continue
		}
		wait := refreshAt.Sub(now)
		if wanted {
			wait = min(wait, at.Sub(now))
		}
		msg, err := ps.ReceiveTimeout(ctx, wait)
		if ctx.Err() != nil {
			return subscribed, ctx.Err()
		}
		if err != nil {
			var netErr interface{ Timeout() bool }
			if errors.As(err, &netErr) && netErr.Timeout() {
				continue
			}
			return subscribed, t.redisErr("subscription", err)
		}
		pinged = false
		switch msg.(type) {
		case *redis.Subscription:
			// (Re)subscribed: changes may have been missed before.
			subscribed = true
			reads.syncWanted = true
		case *redis.Message:
			// A hint, whatever it says: ask Redis what changed.
			reads.syncWanted = true
		}
	}
}

// bounded calls f with ctx bounded by Refresh.
func (t *PolicyTable) bounded(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, t.refresh)
	defer cancel()
	return f(ctx)
}

// report logs err's outage (see PolicyTableConfig.Logger), or an answer
// that may end one, and passes a non-nil err to OnError. An error of a read
// cut short by the end of Run's ctx is neither logged nor reported: Run is
// ending.
func (t *PolicyTable) report(ctx context.Context, err error) {
	if err != nil && ctx.Err() != nil {
		return
	}
	if err == nil {
		t.outage.ok()
		return
	}
	t.outage.failed(err)
	if t.onError != nil {
		t.onError(err)
	}
}

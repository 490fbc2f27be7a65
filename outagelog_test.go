package ratelimit

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// logLine is one line a recordingLog heard: its level, message and
// attributes as key=value text.
type logLine struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// recordingLog is a slog.Handler that records every line, for tests of what
// is logged.
type recordingLog struct {
	mu    sync.Mutex
	lines []logLine
}

func (h *recordingLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordingLog) WithGroup(string) slog.Handler            { return h }

func (h *recordingLog) Handle(_ context.Context, r slog.Record) error {
	line := logLine{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		line.attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, line)
	return nil
}

// taken returns the lines recorded since the last call.
func (h *recordingLog) taken() []logLine {
	h.mu.Lock()
	defer h.mu.Unlock()
	lines := h.lines
	h.lines = nil
	return lines
}

// loggedGuard returns a Guard of cfg around a stubBackend that answers,
// logging to a recordingLog, on a fake clock.
func loggedGuard(t *testing.T, cfg GuardConfig) (*Guard, *stubBackend, *recordingLog, *ratelimittest.Clock) {
	t.Helper()
	backend := &stubBackend{res: Result{Allowed: true, Limit: 10, Remaining: 9}}
	log := &recordingLog{}
	clock := ratelimittest.NewClock(epoch)
	cfg.Logger, cfg.Clock = slog.New(log), clock
	g, err := NewGuard(backend, cfg)
	require.NoError(t, err)
	return g, backend, log, clock
}

func TestGuardLogsAnOutageOnceAtWarnAndItsEndAtInfo(t *testing.T) {
	g, backend, log, clock := loggedGuard(t, GuardConfig{Name: "api", OnFailure: FailClosed})
	ctx := context.Background()
	_, err := g.Allow(ctx, "user:42", 1)
	require.NoError(t, err)
	assert.Empty(t, log.taken(), "nothing while the backend answers")

	backend.set(Result{}, errDown)
	for range 100 {
		_, err := g.Allow(ctx, "user:42", 1)
		require.NoError(t, err)
		clock.Advance(100 * time.Millisecond)
	}
	lines := log.taken()
	require.Len(t, lines, 1, "one line for the outage, not one per call")
	assert.Equal(t, slog.LevelWarn, lines[0].level)
	assert.Equal(t, "ratelimit: backend failing; calls answered by the failure policy", lines[0].msg)
	assert.Equal(t, map[string]string{"limiter": "api", "on_failure": "fail_closed", "error": "connection refused"}, lines[0].attrs)

	backend.set(Result{Allowed: true, Limit: 10, Remaining: 9}, nil)
	for range 99 { // 9.9 s of answers after the latest failure
		_, err := g.Allow(ctx, "user:42", 1)
		require.NoError(t, err)
		clock.Advance(100 * time.Millisecond)
	}
	assert.Empty(t, log.taken(), "not over before 10 s without a failure")
	_, err = g.Allow(ctx, "user:42", 1)
	require.NoError(t, err)
	lines = log.taken()
	require.Len(t, lines, 1)
	assert.Equal(t, slog.LevelInfo, lines[0].level)
	assert.Equal(t, "ratelimit: backend answering again", lines[0].msg)
	assert.Equal(t, map[string]string{"limiter": "api", "on_failure": "fail_closed", "outage": "9.9s", "answered_by_policy": "100"}, lines[0].attrs)

	for range 10 {
		_, err := g.Allow(ctx, "user:42", 1)
		require.NoError(t, err)
	}
	assert.Empty(t, log.taken(), "once over, nothing more")
}

func TestGuardLogsAFlappingBackendAtMostOncePer10s(t *testing.T) {
	g, backend, log, clock := loggedGuard(t, GuardConfig{})
	ctx := context.Background()
	for i := range 600 { // a minute, failing every other call
		if i%2 == 0 {
			backend.set(Result{}, errDown)
		} else {
			backend.set(Result{Allowed: true, Limit: 10}, nil)
		}
		_, err := g.Allow(ctx, "k", 1)
		require.NoError(t, err)
		clock.Advance(100 * time.Millisecond)
	}
	lines := log.taken()
	require.Len(t, lines, 1, "one outage, still going on")
	assert.Equal(t, slog.LevelWarn, lines[0].level)
	assert.Equal(t, "fail_open", lines[0].attrs["on_failure"])
}

func TestGuardLogsCallsTheOpenBreakerKeepsAsPartOfTheOutage(t *testing.T) {
	g, backend, log, clock := loggedGuard(t, GuardConfig{BreakerFailures: 2, BreakerCoolDown: 30 * time.Second})
	ctx := context.Background()
	backend.set(Result{}, errDown)
	for range 2 {
		_, err := g.Allow(ctx, "k", 1)
		require.NoError(t, err)
	}
	require.Equal(t, BreakerOpen, g.BreakerState())
	backend.set(Result{Allowed: true, Limit: 10}, nil)
	for range 29 { // refused by the open breaker, a second apart
		clock.Advance(time.Second)
		_, err := g.Allow(ctx, "k", 1)
		require.NoError(t, err)
	}
	assert.Equal(t, int64(2), backend.calls.Load())
	lines := log.taken()
	require.Len(t, lines, 2)
	assert.Equal(t, "connection refused", lines[0].attrs["error"])
	assert.Equal(t, slog.LevelWarn, lines[1].level)
	assert.Equal(t, "ratelimit: circuit breaker open; the backend is called again by one probe per cool-down", lines[1].msg)

	clock.Advance(time.Second) // the cool-down ends: the probe succeeds
	_, err := g.Allow(ctx, "k", 1)
	require.NoError(t, err)
	require.Equal(t, BreakerClosed, g.BreakerState())
	assert.Empty(t, log.taken(), "the latest refused call was 1 s ago")
	clock.Advance(10 * time.Second)
	_, err = g.Allow(ctx, "k", 1)
	require.NoError(t, err)
	lines = log.taken()
	require.Len(t, lines, 1)
	assert.Equal(t, "ratelimit: backend answering again", lines[0].msg)
	assert.Equal(t, "31" /* 2 failures, 29 refused */, lines[0].attrs["answered_by_policy"])
	assert.Equal(t, "29s", lines[0].attrs["outage"], "from the first failure to the latest refused call")
}

func TestGuardLogsNoKey(t *testing.T) {
	g, backend, log, clock := loggedGuard(t, GuardConfig{OnFailure: FailClosed})
	backend.set(Result{}, fmt.Errorf("ratelimit: RedisGCRA: key %s: %w", KeyDigest("user:secret"), errDown))
	_, err := g.Allow(context.Background(), "user:secret", 1)
	require.NoError(t, err)
	backend.set(Result{Allowed: true, Limit: 10}, nil)
	clock.Advance(time.Minute)
	_, err = g.Allow(context.Background(), "user:secret", 1)
	require.NoError(t, err)
	lines := log.taken()
	require.Len(t, lines, 2)
	for _, l := range lines {
		assert.NotContains(t, fmt.Sprint(l), "user:secret")
	}
}

func TestGuardNamesItsPolicyByPartInItsLog(t *testing.T) {
	a, err := NewGCRA(10, time.Second)
	require.NoError(t, err)
	b, err := NewGCRA(10, time.Second)
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "a", Limiter: a}, Part{Name: "b", Limiter: b})
	require.NoError(t, err)
	g, err := NewGuard(c, GuardConfig{OnFailure: FailOpen, PartFailure: map[string]FailurePolicy{"a": FailClosed}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	assert.Equal(t, "by part", g.outage.attrs[1].Value.String())
}

func TestGuardLogsToTheDefaultLoggerWithoutOne(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(old)
	backend := &stubBackend{err: errDown}
	g, err := NewGuard(backend, GuardConfig{Name: "edge"})
	require.NoError(t, err)
	_, err = g.Allow(context.Background(), "k", 1)
	require.NoError(t, err)
	assert.Contains(t, buf.String(), `level=WARN msg="ratelimit: backend failing; calls answered by the failure policy" limiter=edge on_failure=fail_open error="connection refused"`)
	assert.Equal(t, 1, strings.Count(buf.String(), "limiter=edge"), "one line")
}

func TestGuardLogsNothingWithADiscardLogger(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(old)
	backend := &stubBackend{err: errDown}
	g, err := NewGuard(backend, GuardConfig{Name: "quiet", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	_, err = g.Allow(context.Background(), "k", 1)
	require.NoError(t, err)
	assert.NotContains(t, buf.String(), "limiter=quiet")
}

func TestOutageLogSeesAFailureThatRacesTheEnd(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	log := &recordingLog{}
	o := newOutageLog(slog.New(log), clock, "down", "up", "n")
	for range 100 {
		o.failed(errDown)
		clock.Advance(outageQuiet)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); o.ok() }()
		go func() { defer wg.Done(); o.failed(errDown) }()
		wg.Wait()
		// Whichever came first, the last line says whether the outage
		// goes on: down after the failure, unless the end came after it.
		clock.Advance(outageQuiet)
		o.ok()
	}
	lines := log.taken()
	var down int
	for i, l := range lines {
		if l.msg == "down" {
			down++
			require.True(t, i == 0 || lines[i-1].msg == "up", "lines alternate")
		}
	}
	assert.Equal(t, "up", lines[len(lines)-1].msg)
	assert.GreaterOrEqual(t, down, 100)
}

func TestFleetLogsFailingHeartbeatsOnceAndTheirReturn(t *testing.T) {
	redisDown := fmt.Errorf("dial tcp 10.0.0.1:6379: %w", errDown)
	client := &cannedScripter{reply: int64(3)}
	var heard []error
	f, err := NewFleet(client, FleetConfig{Name: "ratelimit:fleet:api", ID: "r1", OnError: func(err error) { heard = append(heard, err) }})
	require.NoError(t, err)
	log := &recordingLog{}
	clock := ratelimittest.NewClock(epoch)
	f.outage = fleetOutageLog(slog.New(log), clock, "ratelimit:fleet:api", "r1")
	ctx := context.Background()

	f.beat(ctx)
	assert.Equal(t, 3, f.Live())
	client.reply, client.err = nil, redisDown
	for range 5 {
		f.beat(ctx)
		clock.Advance(time.Second)
	}
	assert.Len(t, heard, 5, "OnError hears every failure")
	lines := log.taken()
	require.Len(t, lines, 1)
	assert.Equal(t, slog.LevelWarn, lines[0].level)
	assert.Equal(t, "ratelimit: fleet heartbeats failing; keeping the latest count of live replicas", lines[0].msg)
	assert.Equal(t, "ratelimit:fleet:api", lines[0].attrs["fleet"])
	assert.Equal(t, "r1", lines[0].attrs["id"])
	assert.Equal(t, "3", lines[0].attrs["live"])
	assert.Contains(t, lines[0].attrs["error"], "connection refused")

	client.reply, client.err = int64(2), nil
	for range 9 { // the latest failure was at 4 s: beats at 5 s to 13 s
		f.beat(ctx)
		clock.Advance(time.Second)
	}
	assert.Empty(t, log.taken(), "not before 10 s without a failure")
	f.beat(ctx)
	lines = log.taken()
	require.Len(t, lines, 1)
	assert.Equal(t, slog.LevelInfo, lines[0].level)
	assert.Equal(t, "ratelimit: fleet heartbeats answering again", lines[0].msg)
	assert.Equal(t, "5", lines[0].attrs["failed_heartbeats"])
	assert.Equal(t, "4s", lines[0].attrs["outage"])
}

func TestFleetDoesNotLogAHeartbeatCutShortByTheEndOfRun(t *testing.T) {
	f, err := NewFleet(&cannedScripter{err: context.Canceled}, FleetConfig{Name: "f", Logger: slog.New(&recordingLog{})})
	require.NoError(t, err)
	log := &recordingLog{}
	f.outage = fleetOutageLog(slog.New(log), ratelimittest.NewClock(epoch), "f", "r")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.beat(ctx)
	assert.Empty(t, log.taken())
}

func TestGuardLogsTheBreakerOpeningOncePerOutage(t *testing.T) {
	g, backend, log, clock := loggedGuard(t, GuardConfig{BreakerFailures: 1, BreakerCoolDown: time.Second})
	ctx := context.Background()
	for range 5 { // fails, opens; the probe a second later succeeds and closes it
		backend.set(Result{}, errDown)
		_, err := g.Allow(ctx, "k", 1)
		require.NoError(t, err)
		require.Equal(t, BreakerOpen, g.BreakerState())
		clock.Advance(time.Second)
		backend.set(Result{Allowed: true, Limit: 10}, nil)
		_, err = g.Allow(ctx, "k", 1)
		require.NoError(t, err)
		require.Equal(t, BreakerClosed, g.BreakerState())
	}
	lines := log.taken()
	require.Len(t, lines, 2, "one outage, one opening logged: %v", lines)
	clock.Advance(10 * time.Second)
	_, err := g.Allow(ctx, "k", 1)
	require.NoError(t, err)
	require.Len(t, log.taken(), 1, "the end")

	backend.set(Result{}, errDown)
	_, err = g.Allow(ctx, "k", 1)
	require.NoError(t, err)
	lines = log.taken()
	require.Len(t, lines, 2, "a new outage, its opening logged again")
	assert.Contains(t, lines[1].msg, "circuit breaker open")
}

func TestPolicyTableLogsFailingReadsOnceAndTheirReturn(t *testing.T) {
	_, client, _ := miniredisClock(t)
	var heard []error
	table, err := NewPolicyTable(client, PolicyTableConfig{Name: "plans", OnError: func(err error) { heard = append(heard, err) }})
	require.NoError(t, err)
	log := &recordingLog{}
	clock := ratelimittest.NewClock(epoch)
	table.outage = tableOutageLog(slog.New(log), clock, "plans")

	redisDown := fmt.Errorf("dial tcp 10.0.0.1:6379: %w", errDown)
	for range 3 {
		table.report(context.Background(), redisDown)
		clock.Advance(time.Second)
	}
	assert.Len(t, heard, 3, "OnError hears every error")
	lines := log.taken()
	require.Len(t, lines, 1)
	assert.Equal(t, slog.LevelWarn, lines[0].level)
	assert.Equal(t, "ratelimit: policy table reads failing; deciding on the last copy read", lines[0].msg)
	assert.Equal(t, "plans", lines[0].attrs["table"])
	assert.Contains(t, lines[0].attrs["error"], "connection refused")

	clock.Advance(10 * time.Second)
	table.report(context.Background(), nil)
	lines = log.taken()
	require.Len(t, lines, 1)
	assert.Equal(t, slog.LevelInfo, lines[0].level)
	assert.Equal(t, "3", lines[0].attrs["failed_reads"])
}

func TestAPolicyTableWithoutOnErrorStillLogsItsErrors(t *testing.T) {
	_, client, _ := miniredisClock(t)
	log := &recordingLog{}
	table, err := NewPolicyTable(client, PolicyTableConfig{Name: "plans", Logger: slog.New(log)})
	require.NoError(t, err)
	table.report(context.Background(), fmt.Errorf("ratelimit: PolicyTable %q: %w", "plans", ErrTableMissing))
	lines := log.taken()
	require.Len(t, lines, 1)
	assert.Contains(t, lines[0].attrs["error"], "plans")
}

func TestPolicyTableDoesNotLogAReadCutShortByTheEndOfRun(t *testing.T) {
	_, client, _ := miniredisClock(t)
	var heard []error
	table, err := NewPolicyTable(client, PolicyTableConfig{Name: "plans", OnError: func(err error) { heard = append(heard, err) }})
	require.NoError(t, err)
	log := &recordingLog{}
	table.outage = tableOutageLog(slog.New(log), ratelimittest.NewClock(epoch), "plans")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	table.report(ctx, fmt.Errorf("ratelimit: PolicyTable %q: %w", "plans", context.Canceled))
	assert.Empty(t, log.taken())
	assert.Empty(t, heard)
}

package grpclimit

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/errlog"
)

// downLimiter fails every call as a Redis that is down does.
type downLimiter struct{}

func (downLimiter) Allow(context.Context, string, int) (ratelimit.Result, error) {
	return ratelimit.Result{}, fmt.Errorf("%w: connection refused", ratelimit.ErrBackend)
}

// Without WithOnError, a limiter error is logged at Warn with the error
// and the method, never the key, one line per 10 s at most, the next one
// counting those suppressed; WithOnError replaces the log.
func TestLimiterErrorsAreLoggedOncePerInterval(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	in, err := NewInterceptor(downLimiter{}, func(context.Context, string) (string, error) { return "secret-api-key", nil }, WithLogger(logger))
	require.NoError(t, err)
	in.log = errlog.New(logger, "grpclimit: rate limiter error", func() time.Time { return now })
	call := func() {
		_, err := in.Unary()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/svc/M"}, func(context.Context, any) (any, error) { return nil, nil })
		assert.NoError(t, err, "fails open")
	}
	for range 5 {
		call()
		now = now.Add(time.Second)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 1)
	assert.Contains(t, lines[0], "level=WARN")
	assert.Contains(t, lines[0], "connection refused")
	assert.Contains(t, lines[0], "method=/svc/M")
	now = now.Add(5 * time.Second)
	call()
	lines = strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	assert.Contains(t, lines[1], "suppressed=4")
	assert.NotContains(t, buf.String(), "secret-api-key")

	buf.Reset()
	hooked := 0
	in, err = NewInterceptor(downLimiter{}, func(context.Context, string) (string, error) { return "k", nil }, WithLogger(logger),
		WithOnError(func(context.Context, string, error) { hooked++ }))
	require.NoError(t, err)
	_, _ = in.Unary()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/svc/M"}, func(context.Context, any) (any, error) { return nil, nil })
	assert.Empty(t, buf.String())
	assert.Equal(t, 1, hooked)
}

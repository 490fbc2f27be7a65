package errlog

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// lockedBuffer is a bytes.Buffer safe for concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSpace(b.buf.String()), "\n")
}

// Errors logged at once by many goroutines within one Interval make one
// line; the next line, an Interval later, counts all the others.
func TestConcurrentErrorsMakeOneLinePerInterval(t *testing.T) {
	var out lockedBuffer
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	l := New(slog.New(slog.NewTextHandler(&out, nil)), "test: failed", func() time.Time { return time.Unix(0, now.Load()) })
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				l.Log(context.Background(), errors.New("down"))
			}
		})
	}
	wg.Wait()
	assert.Len(t, out.lines(), 1)
	now.Add(int64(Interval))
	l.Log(context.Background(), errors.New("down"))
	lines := out.lines()
	if assert.Len(t, lines, 2) {
		// The first line may count errors suppressed while it was being
		// written; the two lines count all 799 between them.
		assert.Equal(t, int64(799), suppressed(lines[0])+suppressed(lines[1]))
	}
}

// suppressed returns the suppressed count of a text line, or 0.
func suppressed(line string) int64 {
	_, after, ok := strings.Cut(line, "suppressed=")
	if !ok {
		return 0
	}
	n, _ := strconv.ParseInt(strings.Fields(after)[0], 10, 64)
	return n
}

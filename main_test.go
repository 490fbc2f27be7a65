package ratelimit

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// TestMain stops the real servers the tests shared, then fails the run if
// any test left a goroutine behind: the limiters start none, and every test
// stops the clients and servers it starts.
func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopShared()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

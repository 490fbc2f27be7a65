package ratelimit

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any test leaves a goroutine behind: the limiters
// start none, and every test stops the clients and servers it starts.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

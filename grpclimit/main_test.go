package grpclimit_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any test leaves a goroutine behind: every test
// stops the servers and clients it starts.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

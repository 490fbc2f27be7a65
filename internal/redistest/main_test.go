package redistest_test

import (
	"os"
	"testing"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// TestMain stops the servers Shared and SharedCluster kept for the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopShared()
	os.Exit(code)
}

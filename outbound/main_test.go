package outbound

import (
	"os"
	"testing"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// TestMain stops the shared redis-server the tests started, if any.
func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopShared()
	os.Exit(code)
}

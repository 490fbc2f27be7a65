package redistest_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// commandCalls returns how many times the server behind c ran command, as
// INFO commandstats counts it (0 when it never ran).
func commandCalls(t *testing.T, c *redis.Client, command string) string {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+command+":calls="); ok {
			calls, _, _ := strings.Cut(rest, ",")
			return calls
		}
	}
	return "0"
}

func TestSharedHandsOutOneServerAtATimeAndEmptiesItBetweenTests(t *testing.T) {
	ctx := context.Background()
	var first *redistest.Server
	const script = "return 1"
	t.Run("first test", func(t *testing.T) {
		first = redistest.Shared(t)
		c := first.Client(t)
		require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
		require.NoError(t, c.Do(ctx, "SELECT", 3).Err())
		require.NoError(t, c.ScriptLoad(ctx, script).Err())

		second := redistest.Shared(t)
		assert.NotEqual(t, first.Addr, second.Addr, "a server handed out is no one else's until the test ends")
	})
	t.Run("next test", func(t *testing.T) {
		s := redistest.Shared(t)
		assert.Equal(t, first.Addr, s.Addr, "the idle server is handed out again, not started anew")
		c := s.Client(t)
		n, err := c.DBSize(ctx).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "no key of the test before")
		exists, err := c.ScriptExists(ctx, redis.NewScript(script).Hash()).Result()
		require.NoError(t, err)
		assert.Equal(t, []bool{false}, exists, "no script of the test before")
		assert.Equal(t, "0", commandCalls(t, c, "set"), "no statistics of the test before")
	})
}

func TestSharedStopsAServerATestKilledOrPausedInsteadOfHandingItOut(t *testing.T) {
	var killed, paused *redistest.Server
	var pausedPid int
	t.Run("kills and pauses", func(t *testing.T) {
		killed, paused = redistest.Shared(t), redistest.Shared(t)
		pausedPid = paused.Pid()
		killed.Kill()
		paused.Pause()
	})
	assert.Zero(t, killed.Pid())
	assert.Zero(t, paused.Pid(), "stopped")
	requireGone(t, pausedPid)
	t.Run("next test", func(t *testing.T) {
		s := redistest.Shared(t)
		assert.NotContains(t, []string{killed.Addr, paused.Addr}, s.Addr)
		require.NoError(t, s.Client(t).Ping(context.Background()).Err())
	})
}

func TestSharedClusterIsHandedOutAgainEmpty(t *testing.T) {
	ctx := context.Background()
	var addrs []string
	t.Run("first test", func(t *testing.T) {
		c := redistest.SharedCluster(t)
		require.Len(t, c.Servers, 3)
		addrs = c.Addrs
		cc := c.Client(t)
		for _, k := range []string{"a", "b", "c", "d", "e"} {
			require.NoError(t, cc.Set(ctx, k, k, 0).Err())
		}
	})
	t.Run("next test", func(t *testing.T) {
		c := redistest.SharedCluster(t)
		assert.Equal(t, addrs, c.Addrs, "the idle cluster, not a new one")
		var mu sync.Mutex
		var total int64
		require.NoError(t, c.Client(t).ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			n, err := node.DBSize(ctx).Result()
			mu.Lock()
			total += n
			mu.Unlock()
			return err
		}))
		assert.Zero(t, total, "no key of the test before")
	})
}

func TestSharedSkipsWithoutRedisServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for name, get := range map[string]func(t *testing.T){
		"Shared":        func(t *testing.T) { redistest.Shared(t) },
		"SharedCluster": func(t *testing.T) { redistest.SharedCluster(t) },
	} {
		var inner *testing.T
		t.Run(name, func(t *testing.T) {
			inner = t
			get(t)
			t.Errorf("%s returned although redis-server is not on PATH", name)
		})
		assert.True(t, inner.Skipped(), name)
	}
}

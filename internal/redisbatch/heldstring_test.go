package redisbatch

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// TestAConcurrencyKeyLeftWithOneLeaseIsItsStringAgain takes two leases on
// one key of a concurrency limit, which makes it a HASH, and releases the
// later one, on the script of its kind on the caller's clock: the key is the
// STRING of the lease that still holds again, with a TTL until that lease's
// expiry, and a pair on it after that leaves it so. On miniredis and on a
// real redis-server (skipped without one).
func TestAConcurrencyKeyLeftWithOneLeaseIsItsStringAgain(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		_, client, _ := redistest.Miniredis(t, time.Unix(1_700_000_000, 0))
		checkOneLeaseLeftIsAString(t, client, false)
	})
	t.Run("redis-server", func(t *testing.T) {
		checkOneLeaseLeftIsAString(t, redistest.Start(t).Client(t), true)
	})
}

// checkOneLeaseLeftIsAString is TestAConcurrencyKeyLeftWithOneLeaseIsItsStringAgain
// on client; real tells a server whose TTLs run on the wall clock, whose
// PTTL it checks to within a second.
func checkOneLeaseLeftIsAString(t *testing.T, client *redis.Client, real bool) {
	src := ownScript(t, Concurrency).caller
	ctx := context.Background()
	const key, ttl = "k", 2_000_000 // µs
	now := int64(1_700_000_000_000_000)
	call := func(at int64, head any, lease string) {
		t.Helper()
		require.NoError(t, client.Eval(ctx, src, []string{key}, at, -1, 1, "c", 5, ttl, head, lease).Err())
	}
	checkTTL := func(want time.Duration) {
		t.Helper()
		got, err := client.PTTL(ctx, key).Result()
		require.NoError(t, err)
		if real {
			assert.InDelta(t, float64(want), float64(got), float64(time.Second))
			return
		}
		assert.Equal(t, want, got)
	}
	call(now, 1, "a")
	call(now+1000, 1, "b")
	typ, err := client.Type(ctx, key).Result()
	require.NoError(t, err)
	require.Equal(t, "hash", typ, "two leases make a HASH")
	call(now+2000, "R", "b")
	v, err := client.Get(ctx, key).Result()
	require.NoError(t, err, "the key of one lease left is a STRING")
	assert.Equal(t, "a:1700000002000000", v)
	checkTTL(1998 * time.Millisecond) // until the expiry of a
	call(now+3000, 1, "c")
	call(now+4000, "R", "c")
	v, err = client.Get(ctx, key).Result()
	require.NoError(t, err)
	assert.Equal(t, "a:1700000002000000", v)
	checkTTL(1996 * time.Millisecond)
}

// TestAConcurrencyPairMakesAtMostSixCommands counts, in a real
// redis-server's INFO commandstats, the commands that an Acquire and a
// Release of a concurrency limit's own script (the caller's clock, so no
// TIME) make: on an empty key at most 4, and 6 on a key that holds another lease,
// whose pair acquires beside it and releases back to it. Skipped without
// redis-server.
func TestAConcurrencyPairMakesAtMostSixCommands(t *testing.T) {
	client := redistest.Start(t).Client(t)
	src := ownScript(t, Concurrency).caller
	ctx := context.Background()
	now := int64(1_700_000_000_000_000)
	call := func(key string, head any, lease string) {
		t.Helper()
		now += 1000
		require.NoError(t, client.Eval(ctx, src, []string{key}, now, -1, 1, "c", 5, 60_000_000, head, lease).Err())
	}
	pair := func(key string) int64 {
		t.Helper()
		require.NoError(t, client.ConfigResetStat(ctx).Err())
		call(key, 1, "p")
		call(key, "R", "p")
		info, err := client.InfoMap(ctx, "commandstats").Result()
		require.NoError(t, err)
		var n int64
		for name, stat := range info["Commandstats"] {
			if name == "cmdstat_eval" || name == "cmdstat_info" || name == "cmdstat_config|resetstat" {
				continue
			}
			var calls int64
			_, err := fmt.Sscanf(stat, "calls=%d", &calls)
			require.NoError(t, err, stat)
			n += calls
		}
		return n
	}
	assert.LessOrEqual(t, pair("empty"), int64(4), "an empty key")
	call("held", 1, "a")
	pair("held") // the first makes the key a HASH, and its Release makes it a STRING again
	assert.Equal(t, int64(6), pair("held"), "a key holding a lease")
	assert.Equal(t, int64(6), pair("held"), "a key holding a lease, again")
}

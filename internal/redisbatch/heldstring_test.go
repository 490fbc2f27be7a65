package redisbatch

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// TestAConcurrencyKeyLeftWithOneLeaseIsItsStringAgain takes two leases on
// one key of a concurrency limit, which makes it a HASH, and releases the
// later one, on the script of its kind on the caller's clock: the key is the
// STRING of the lease that still holds again, with a TTL until that lease's
// expiry, and a pair on it after that leaves it so.
func TestAConcurrencyKeyLeftWithOneLeaseIsItsStringAgain(t *testing.T) {
	m, client, _ := redistest.Miniredis(t, time.Unix(1_700_000_000, 0))
	src := ownScript(t, Concurrency).caller
	ctx := context.Background()
	const key, ttl = "k", 2_000_000 // µs
	now := int64(1_700_000_000_000_000)
	call := func(at int64, head any, lease string) {
		t.Helper()
		require.NoError(t, client.Eval(ctx, src, []string{key}, at, -1, 1, "c", 5, ttl, head, lease).Err())
	}
	call(now, 1, "a")
	call(now+1000, 1, "b")
	typ, err := client.Type(ctx, key).Result()
	require.NoError(t, err)
	require.Equal(t, "hash", typ, "two leases make a HASH")
	call(now+2000, "R", "b")
	v, err := m.Get(key)
	require.NoError(t, err, "the key of one lease left is a STRING")
	assert.Equal(t, "a:1700000002000000", v)
	assert.Equal(t, 1998*time.Millisecond, m.TTL(key), "until the expiry of a")
	call(now+3000, 1, "c")
	call(now+4000, "R", "c")
	v, err = m.Get(key)
	require.NoError(t, err)
	assert.Equal(t, "a:1700000002000000", v)
	assert.Equal(t, 1996*time.Millisecond, m.TTL(key))
}

package redisbatch

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// ByNode reports whether s's client spreads keys over several servers
// whose health is their own: a *redis.ClusterClient (by hash slot) or a
// *redis.Ring (by hash tag). Node then names the server of a key.
func (s *Sender) ByNode() bool { return s.route == routeSlot || s.route == routeTag }

// Node returns the address of the server that serves every Redis key
// StoredKey makes of key (whatever its prefix and seg, which hold no
// braces), as the client routes it now: on a cluster, the master of key's
// hash slot in the client's latest view of the cluster; on a ring, the
// shard of the stored key's hash tag among the shards the ring counts as
// up. It returns "" when the client has no view yet (a cluster client
// before its first answer), and for a client of one server or of unknown
// routing. It asks nothing of any server and allocates nothing.
func (s *Sender) Node(key string) string {
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		if s.route != routeSlot {
			return ""
		}
		// Any key of the slot routes alike; slotKeys has one of each,
		// made once. doneCtx keeps a client without a view from loading
		// one here: its own calls do.
		node, err := c.MasterForKey(doneCtx, slotKeys()[HashSlot(key)])
		if err != nil || node == nil {
			return ""
		}
		return node.Options().Addr
	case *redis.Ring:
		node, err := c.GetShardClientForKey(storedTag(key))
		if err != nil || node == nil {
			return ""
		}
		return node.Options().Addr
	}
	return ""
}

// storedTag returns the hash tag of every Redis key StoredKey makes of
// key, which a ring hashes (a tag has no '}', so it is its own tag).
func storedTag(key string) string {
	switch {
	case key != "" && strings.IndexByte(key, '}') < 0:
		return key
	case hashTag(key) != key:
		return hashTag(key)
	}
	return slotKeys()[HashSlot(key)]
}

// doneCtx is a context that is already done: a client's routing lookup
// given it fails at once rather than make a round trip.
var doneCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// slotKeys returns, for each hash slot, a key in that slot: its slotTags
// tag. The table is made on first use and never written.
var slotKeys = sync.OnceValue(func() *[clusterSlots]string {
	var t [clusterSlots]string
	for slot, tag := range slotTags {
		t[slot] = string(tag[:])
	}
	return &t
})

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

// Node returns the address of the server that serves the Redis key
// prefix + key, as the client routes it now: on a cluster, the master of
// the key's hash slot in the client's latest view of the cluster; on a
// ring, the shard of the key's hash tag among the shards the ring counts
// as up. It returns "" when the client has no view yet (a cluster client
// before its first answer), and for a client of one server or of unknown
// routing. It asks nothing of any server, and allocates nothing but on a
// ring for a key without a hash tag.
func (s *Sender) Node(prefix, key string) string {
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		if s.route != routeSlot {
			return ""
		}
		// Any key of the slot routes alike; slotKeys has one of each,
		// made once. doneCtx keeps a client without a view from loading
		// one here: its own calls do.
		node, err := c.MasterForKey(doneCtx, slotKeys()[HashSlotOf(prefix, key)])
		if err != nil || node == nil {
			return ""
		}
		return node.Options().Addr
	case *redis.Ring:
		// The ring hashes a key's tag (a tag has no '}', so it is its own
		// tag), or the whole key.
		a, b := hashTagOf(prefix, key)
		k := a
		switch {
		case a == "":
			k = b
		case b != "":
			k = a + b
		}
		node, err := c.GetShardClientForKey(k)
		if err != nil || node == nil {
			return ""
		}
		return node.Options().Addr
	}
	return ""
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

// HashSlotOf returns HashSlot(prefix + key) without making that string.
func HashSlotOf(prefix, key string) int {
	a, b := hashTagOf(prefix, key)
	var crc uint16
	for i := 0; i < len(a); i++ {
		crc = crc16Next(crc, a[i])
	}
	for i := 0; i < len(b); i++ {
		crc = crc16Next(crc, b[i])
	}
	return int(crc) % clusterSlots
}

// hashTagOf returns hashTag(a + b) as the two pieces a and b hold of it:
// the tag of a + b when it has one, from a's piece on into b's, and
// otherwise a and b whole.
func hashTagOf(a, b string) (string, string) {
	if open := strings.IndexByte(a, '{'); open >= 0 {
		rest := a[open+1:]
		if end := strings.IndexByte(rest, '}'); end >= 0 {
			if end > 0 {
				return rest[:end], ""
			}
			return a, b // "{}": no tag
		}
		if end := strings.IndexByte(b, '}'); end >= 0 && len(rest)+end > 0 {
			return rest, b[:end]
		}
		return a, b
	}
	if open := strings.IndexByte(b, '{'); open >= 0 {
		if end := strings.IndexByte(b[open+1:], '}'); end > 0 {
			return "", b[open+1 : open+1+end]
		}
	}
	return a, b
}

package redisbatch

import (
	"github.com/redis/go-redis/v9"
)

// route is how the server or servers behind a client take a batch of
// requests: which keys one script call may touch.
type route int

const (
	// routeOne: one server (*redis.Client, failover clients included); one
	// call may touch any keys.
	routeOne route = iota
	// routeSlot: a Redis Cluster (*redis.ClusterClient); one call per hash
	// slot, the calls of a batch pipelined to each node.
	routeSlot
	// routeTag: a *redis.Ring, which shards by hash tag; one call per hash
	// tag, pipelined to each shard.
	routeTag
	// routeAlone: any other redis.Scripter, whose routing is unknown; one
	// call per request, and no coalescing.
	routeAlone
)

// routeOf returns the route of client.
func routeOf(client redis.Scripter) route {
	switch client.(type) {
	case *redis.Client:
		return routeOne
	case *redis.ClusterClient:
		return routeSlot
	case *redis.Ring:
		return routeTag
	}
	return routeAlone
}

// sendsOnce reports whether a script call through client can be held to
// one write with an onceArg. A *redis.AutoPipeliner cannot: it marshals a
// command's arguments to size its batches before it writes them, and its
// calls go with go-redis's own retry policy.
func sendsOnce(client redis.Scripter) bool {
	_, auto := client.(*redis.AutoPipeliner)
	return !auto
}

// sameShard reports whether keys a and b can be touched by one script call
// on a client of route: in one hash slot on a cluster, with one hash tag on
// a ring, always on one server.
func sameShard(r route, a, b string) bool {
	switch r {
	case routeSlot:
		return HashSlot(a) == HashSlot(b)
	case routeTag:
		return hashTag(a) == hashTag(b)
	}
	return true
}

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// HashSlot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of
// its hash tag, modulo 16384, as the server's CLUSTER KEYSLOT gives it.
func HashSlot(key string) int {
	var crc uint16
	for _, b := range []byte(hashTag(key)) {
		crc = crc16Next(crc, b)
	}
	return int(crc) % clusterSlots
}

// crc16Next returns the CRC16 (XMODEM) of a string whose CRC16 is crc,
// followed by b.
func crc16Next(crc uint16, b byte) uint16 {
	return crc<<8 ^ crc16Table[byte(crc>>8)^b]
}

// slotTagChars are the bytes of a slotTags tag.
const slotTagChars = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// slotTags holds, for each hash slot, a tag of three slotTagChars in that
// slot: the first such tag, in the order of slotTagChars. A key that starts
// with "{" + tag + "}" is in the tag's slot. Every slot has one: a test
// checks them all. It is computed once and never written.
var slotTags = func() (t [clusterSlots][3]byte) {
	left := clusterSlots
	for _, a := range []byte(slotTagChars) {
		crcA := crc16Next(0, a)
		for _, b := range []byte(slotTagChars) {
			crcB := crc16Next(crcA, b)
			for _, c := range []byte(slotTagChars) {
				slot := crc16Next(crcB, c) % clusterSlots
				if t[slot][0] != 0 {
					continue
				}
				t[slot] = [3]byte{a, b, c}
				if left--; left == 0 {
					return t
				}
			}
		}
	}
	return t
}()

// crc16Table is the CRC16-CCITT (XMODEM, polynomial 0x1021) of each byte
// value. It is computed once and never written.
var crc16Table = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

// split returns the script calls that decide batch: one for a single
// server; for a cluster, one per hash slot; for a ring, one per hash tag.
// Each call keeps the order of its requests. The keys of one request share
// a slot (and tag); their owners see to it.
func (s *Sender) split(batch []*Request) []scriptCall {
	if len(batch) == 1 || s.route == routeOne || s.route == routeAlone {
		return []scriptCall{{batch: batch}}
	}
	var calls []scriptCall
	index := make(map[any]int, len(batch))
	for _, p := range batch {
		p.formKey()
		var group any = hashTag(p.Key)
		if s.route == routeSlot {
			group = HashSlot(p.Key)
		}
		i, ok := index[group]
		if !ok {
			i = len(calls)
			index[group] = i
			calls = append(calls, scriptCall{})
		}
		calls[i].batch = append(calls[i].batch, p)
	}
	return calls
}

package ratelimit

import "sync/atomic"

// A full DenyCache makes room for a new denial by evicting one it holds,
// chosen for saving the fewest backend calls: a denial's worth is the
// calls it has answered (its hits), and a new denial starts with half the
// hits of the key's denial it replaces, so that a key that was answered
// locally stays ahead of keys that never were. A flood of distinct keys,
// each denied once and never asked again, thus churns among its own
// denials (each worth 0) and never evicts one that answers calls, however
// many keys it brings.
//
// The choice is sampled, as a clock or sampled LRU is, not exact: a
// newcomer looks at up to evictSamples denials of its own shard (older
// ones first) and, when none there is worth no more than it, of up to
// evictShards-1 shards after it, and evicts the one that has passed, or
// else the one of fewest hits (the one that ends first among equals),
// when that one is worth no more than the newcomer. Map iteration in Go
// starts at a random place, so the sample is random, without allocating
// or keeping any list; the cost is paid only when the cache is full, by
// the call whose denial finds it so.

// denial is a backend's denial of a call on a key: while now < until, it
// bounds what the key can allow.
type denial struct {
	until int64
	at    int64 // when the backend was asked
	d     Decision
	n     int      // the cost denied
	slots []uint16 // the give-back counters of the call's part keys
	stamp uint64   // their sum before the backend was asked
	// hits counts the calls it answered, up to maxHits, from half its
	// key's previous denial's (see above): its worth when a
	// full DenyCache makes room. The one field written once held.
	hits atomic.Uint32
}

// evictSamples is the most denials a newcomer to a full DenyCache looks at
// in one shard; evictShards the most shards it looks in.
const (
	evictSamples = 8
	evictShards  = 4
)

// maxHits is where a denial's count of calls answered stops: enough to
// tell a hot key from a flood's, and few enough that the count stops
// being written (and moving between cores) soon after a denial is
// remembered.
const maxHits = 255

// hit counts one call answered by d, up to maxHits.
func (d *denial) hit() {
	if d.hits.Load() < maxHits {
		d.hits.Add(1)
	}
}

// inherit gives d, a denial about to replace old for the same key, half
// old's hits: the key's worth decays by half each time its denial is
// made again without answering a call. A nil old leaves d at 0.
func (d *denial) inherit(old *denial) {
	if old != nil {
		d.hits.Store(old.hits.Load() / 2)
	}
}

// evictable returns the key of sh's best denial to evict, among up to
// evictSamples of them, and where it is, when it has passed at now or is
// worth no more than worth; false when none of those sampled is. The
// caller holds sh.mu.
func evictable(sh *tableShard[*denial], now int64, worth uint32) (string, where, bool) {
	var best string
	var bestAt where
	var bestRec *denial
	seen := 0
	consider := func(key string) {
		rec, w := sh.lookup(key) // the hot key's entry may be stale in the map
		if w == absent || rec == nil {
			return
		}
		if bestRec == nil || evictsBefore(rec, bestRec, now) {
			best, bestAt, bestRec = key, w, rec
		}
	}
	for key := range sh.prev.states {
		if seen == evictSamples/2 {
			break
		}
		consider(key)
		seen++
	}
	for key := range sh.cur.states {
		if seen == evictSamples {
			break
		}
		consider(key)
		seen++
	}
	if bestRec == nil || bestRec.until > now && bestRec.hits.Load() > worth {
		return "", absent, false
	}
	return best, bestAt, true
}

// evictsBefore reports whether a is a better denial to evict than b at
// now: one that has passed first, then the one of fewer hits, then the one
// that ends first.
func evictsBefore(a, b *denial, now int64) bool {
	aPassed, bPassed := a.until <= now, b.until <= now
	if aPassed != bPassed {
		return aPassed
	}
	if ah, bh := a.hits.Load(), b.hits.Load(); ah != bh {
		return ah < bh
	}
	return a.until < b.until
}

package ratelimit

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// keyTable holds the in-process limiters' per-key state, a V for each key
// that is not back to its full limit, and forgets keys once they are, with no
// goroutine.
//
// Each state has an expiry: the time after which the key is full again, so an
// absent key means the same. Keys are spread over shards, each with its own
// lock and its own time, which never goes backwards. A shard keeps two
// generations of keys: cur, written since cur.born, and prev, written before.
// A state written at time w expires by w + span at the latest, so once a
// shard's time is span past cur.born, every key in prev has expired and prev
// is dropped whole; cur becomes prev, or goes too if all of it has expired.
// Memory is thus bounded by the keys written within the last two spans, and
// by those within the last span once they have all expired; a busy shard's
// maps may keep room for up to twice as many (see tableShard.turn), and a
// recycling table's spares the emptied states of the keys dropped at the
// last turn.
//
// A table whose states may outlive span (a token bucket in debt) says how
// to read a state's expiry (see outliving): the states of a generation about
// to be dropped that have not expired are then carried into the current one,
// which costs a look at every key of that generation, once.
//
// A keyTable is safe for concurrent use through its shards' locks.
type keyTable[V any] struct {
	seed   maphash.Seed
	span   int64 // ns: no state outlives its write by more than this, but see outliving
	shards [shardCount]tableShard[V]

	// counted makes the table keep held, the number of keys in all shards,
	// for a bound on the keys held at once (see reserve). Limiters leave
	// it off: one counter shared by every core costs on the hot path.
	counted   bool
	held      atomic.Int64
	lastSweep atomic.Int64 // the reading of the latest sweep
}

// shardCount is the number of independently locked parts of a keyTable; a
// power of two.
const shardCount = 64

// minSpan is the shortest time a generation lasts, so that limits that reset
// within microseconds do not make a new map on every call.
const minSpan = int64(time.Millisecond)

// tableShard holds the keys whose hash falls on it. Its fields are guarded by
// mu.
//
// The key written last is also held in hot, and belongs to the current
// generation. Writes to it while it stays the last key go to hot only, which
// marks it dirty: its entry in cur.states is then stale until hot is flushed
// there, when another key is written or the generations turn. A run of calls
// on one key thus costs no map operation after the first, and a call on
// another key costs the lookup and the update a plain map would.
type tableShard[V any] struct {
	mu   sync.Mutex
	now  int64  // latest time seen; never goes backwards
	seq  uint64 // the last id a Concurrency gave a lease of a key of this shard
	hot  hotEntry[V]
	cur  generation[V]
	prev generation[V]
	// expiry, when set (see keyTable.outliving), returns a state's
	// expiry, so that turn keeps the states that outlive their generation.
	expiry func(V) int64
	// recycle, when set (see keyTable.recycling), empties the state of a
	// key that a turn drops for a new key to reuse, and reports whether it
	// is worth keeping; spares holds those of the last turn (see spare).
	recycle func(V) (V, bool)
	spares  []V
	_       [64]byte // keeps neighbouring shards' locks off one cache line
}

// hotEntry is a shard's last written key and its state.
type hotEntry[V any] struct {
	key   string
	state V
	ok    bool // there is a hot key
	dirty bool // state is newer than the key's entry in cur.states
}

// generation is a set of keys last written within one stretch of time.
type generation[V any] struct {
	states    map[string]V // nil until the first write
	born      int64        // when the generation started
	maxExpiry int64        // the latest expiry written into it
	// held is the most keys states has held at a turn, over every
	// generation it served (see turn): what its storage was grown for.
	held int
}

// where says where lookup found a key.
type where int8

const (
	absent where = iota
	inHot
	inCur
	inPrev
)

// newKeyTable returns a keyTable whose states expire at most span ns after
// they are written.
func newKeyTable[V any](span int64) *keyTable[V] {
	return &keyTable[V]{seed: maphash.MakeSeed(), span: max(span, minSpan)}
}

// outliving makes t keep the states that outlive their write by more than
// span, reading a state's expiry with expiry, and returns t. It is called
// before t is used.
func (t *keyTable[V]) outliving(expiry func(V) int64) *keyTable[V] {
	for i := range t.shards {
		t.shards[i].expiry = expiry
	}
	return t
}

// recycling makes t keep, at each turn of a busy shard that reuses its map
// (see tableShard.turn), the states of the keys it drops, emptied by
// recycle, for new keys of the shard to take until the next turn (see
// tableShard.spare); recycle reports whether a state is worth keeping. It
// is called before t is used, and returns t.
func (t *keyTable[V]) recycling(recycle func(V) (V, bool)) *keyTable[V] {
	for i := range t.shards {
		t.shards[i].recycle = recycle
	}
	return t
}

// stopRecycling makes t keep no more spares (see recycling), for a table
// whose states a caller may hold across a turn of their shard and write
// back. It is safe for concurrent use with the table's calls.
func (t *keyTable[V]) stopRecycling() {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		sh.recycle, sh.spares = nil, nil
		sh.mu.Unlock()
	}
}

// shard returns the shard key falls on.
func (t *keyTable[V]) shard(key string) *tableShard[V] {
	return &t.shards[t.shardIndex(key)]
}

// shardIndex returns the index of the shard key falls on, below
// shardCount.
func (t *keyTable[V]) shardIndex(key string) int {
	return int(maphash.String(t.seed, key) & (shardCount - 1))
}

// lockShard locks shard i and moves its time to reading, as lock does.
func (t *keyTable[V]) lockShard(i int, reading, maxNow int64) (sh *tableShard[V], now int64) {
	sh = &t.shards[i]
	sh.mu.Lock()
	return sh, t.advance(sh, reading, maxNow)
}

// lock locks key's shard, moves its time to reading (see advance) and
// returns the shard and its time. The caller unlocks sh.mu.
func (t *keyTable[V]) lock(key string, reading, maxNow int64) (sh *tableShard[V], now int64) {
	sh = t.shard(key)
	sh.mu.Lock()
	return sh, t.advance(sh, reading, maxNow)
}

// advance moves sh's time to reading (see tableShard.advance), turning its
// generations when due, and returns its time. The caller holds sh.mu.
func (t *keyTable[V]) advance(sh *tableShard[V], reading, maxNow int64) int64 {
	if sh.step(reading, maxNow, t.span) {
		t.turn(sh)
	}
	return sh.now
}

// turn turns sh's generations (see tableShard.turn) and, in a counted table,
// takes the keys it drops off held. The caller holds sh.mu.
func (t *keyTable[V]) turn(sh *tableShard[V]) {
	before := sh.size()
	sh.turn()
	if dropped := before - sh.size(); t.counted && dropped != 0 {
		t.held.Add(-int64(dropped))
	}
}

// drop removes key's state, if any, at a clock reading of reading (time
// standing still past maxNow): the key is back to its full limit.
func (t *keyTable[V]) drop(key string, reading, maxNow int64) {
	sh, _ := t.lock(key, reading, maxNow)
	_, w := sh.lookup(key)
	t.remove(sh, key, w)
	sh.mu.Unlock()
}

// remove deletes key, found by lookup in sh at w, and in a counted table
// takes it off held. The caller holds sh.mu.
func (t *keyTable[V]) remove(sh *tableShard[V], key string, w where) {
	sh.remove(key, w)
	if t.counted && w != absent {
		t.held.Add(-1)
	}
}

// reserve counts one more key in a counted table if fewer than limit are
// held, and reports whether it did; the caller then writes a key that was
// absent. Concurrent reservations never take held past limit.
func (t *keyTable[V]) reserve(limit int64) bool {
	for {
		held := t.held.Load()
		if held >= limit {
			return false
		}
		if t.held.CompareAndSwap(held, held+1) {
			return true
		}
	}
}

// sweep advances every shard to reading, so that a counted table drops the
// keys of shards no call has touched since they expired. It runs at most
// once per minSpan of readings, as it locks every shard in turn. The caller
// holds no shard's lock.
func (t *keyTable[V]) sweep(reading, maxNow int64) {
	last := t.lastSweep.Load()
	if reading-last < minSpan && reading >= last || !t.lastSweep.CompareAndSwap(last, reading) {
		return
	}
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		t.advance(sh, reading, maxNow)
		sh.mu.Unlock()
	}
}

// lagBehind returns how far a clock reading is behind a shard's time now:
// the wait until the clock catches up, which every wait a limiter reports
// must include. It is 0 for a reading at or past now.
// The lag saturates at maxSpan, however far back the clock was set, so that
// adding it to a span cannot overflow.
func lagBehind(now, reading int64) int64 {
	if reading >= now {
		return 0
	}
	// now >= 0, so now-maxSpan cannot overflow, and when reading is above
	// it, neither can now-reading.
	if reading <= now-maxSpan {
		return maxSpan
	}
	return now - reading
}

// advance moves the shard's time to reading, unless reading is earlier (then
// time stands still until the clock catches up), drops generations that have
// all expired, and returns the shard's time. The caller holds sh.mu.
func (sh *tableShard[V]) advance(reading, maxNow, span int64) int64 {
	if sh.step(reading, maxNow, span) {
		sh.turn()
	}
	return sh.now
}

// step moves the shard's time to reading, but never back nor past maxNow,
// and reports whether its generations are due to turn: whether the current
// one is span old. The caller holds sh.mu.
func (sh *tableShard[V]) step(reading, maxNow, span int64) bool {
	sh.now = min(max(reading, sh.now), maxNow)
	return sh.now-sh.cur.born >= span
}

// turn starts a new current generation at the shard's time: the current one
// becomes prev, unless all of it has expired, and the old prev is dropped,
// but for the states that sh.expiry, when set, says expire later, which move
// to the new generation. The caller holds sh.mu.
//
// A shard that stays busy reuses the old prev's map, emptied but for the
// states that move, as the new generation's, so that a steady load of keys
// allocates no map: it does so while that map was grown for at most twice
// the keys the current generation holds, so memory stays within about
// twice that of the keys of the last two spans, and a shard whose keys have
// all expired drops both maps. With recycle set, the states the reused map
// drops become the shard's spares, in place of the last turn's; a turn that
// reuses no map drops the spares.
func (sh *tableShard[V]) turn() {
	now := sh.now
	sh.flushHot()
	old := sh.prev
	if sh.cur.maxExpiry <= now {
		sh.prev = generation[V]{}
	} else {
		sh.prev = sh.cur
		sh.prev.held = max(sh.prev.held, len(sh.prev.states))
	}
	sh.cur = generation[V]{born: now}
	carry := sh.expiry != nil && old.maxExpiry > now
	clear(sh.spares)
	sh.spares = sh.spares[:0]
	if old.states != nil && old.held <= 2*len(sh.prev.states) {
		sh.cur.states, sh.cur.held = old.states, old.held
		if carry || sh.recycle != nil {
			for key, state := range old.states {
				if carry {
					if e := sh.expiry(state); e > now {
						sh.cur.maxExpiry = max(sh.cur.maxExpiry, e)
						continue
					}
					delete(old.states, key)
				}
				if sh.recycle != nil {
					sh.keepSpare(state)
				}
			}
		}
		if !carry {
			clear(old.states)
		}
		return
	}
	sh.spares = nil
	if !carry {
		return
	}
	for key, state := range old.states {
		if e := sh.expiry(state); e > now {
			if sh.cur.states == nil {
				sh.cur.states = make(map[string]V)
			}
			sh.cur.states[key] = state
			sh.cur.maxExpiry = max(sh.cur.maxExpiry, e)
		}
	}
}

// keepSpare keeps state, dropped by a turn, as a spare if recycle says it
// is worth keeping. The caller holds sh.mu.
func (sh *tableShard[V]) keepSpare(state V) {
	if spare, ok := sh.recycle(state); ok {
		sh.spares = append(sh.spares, spare)
	}
}

// spare returns the state of a key dropped at the last turn, emptied by
// recycle, for a new key to take (it is no longer the shard's), or the zero
// V when there is none. The caller holds sh.mu.
func (sh *tableShard[V]) spare() V {
	var zero V
	n := len(sh.spares)
	if n == 0 {
		return zero
	}
	state := sh.spares[n-1]
	sh.spares[n-1] = zero
	sh.spares = sh.spares[:n-1]
	return state
}

// lookup returns key's state and where it is; absent and the zero V if it is
// nowhere. The caller holds sh.mu.
func (sh *tableShard[V]) lookup(key string) (V, where) {
	if sh.hot.ok && sh.hot.key == key {
		return sh.hot.state, inHot
	}
	if state, ok := sh.cur.states[key]; ok {
		return state, inCur
	}
	if state, ok := sh.prev.states[key]; ok {
		return state, inPrev
	}
	var zero V
	return zero, absent
}

// write sets the state of key, found by lookup at w, to state, which expires
// at expiry. The key becomes the shard's hot key, in the current generation.
// The caller holds sh.mu.
func (sh *tableShard[V]) write(key string, w where, state V, expiry int64) {
	sh.cur.maxExpiry = max(sh.cur.maxExpiry, expiry)
	if w == inHot {
		sh.hot.state, sh.hot.dirty = state, true
		return
	}
	sh.flushHot()
	if w == inPrev {
		delete(sh.prev.states, key)
	}
	if sh.cur.states == nil {
		sh.cur.states = make(map[string]V)
	}
	sh.cur.states[key] = state
	sh.hot = hotEntry[V]{key: key, state: state, ok: true}
}

// remove deletes key, found by lookup at w. The caller holds sh.mu.
func (sh *tableShard[V]) remove(key string, w where) {
	switch w {
	case inHot:
		// The hot key's entry in cur.states goes with it.
		delete(sh.cur.states, key)
		sh.hot = hotEntry[V]{}
	case inCur:
		delete(sh.cur.states, key)
	case inPrev:
		delete(sh.prev.states, key)
	}
}

// flushHot writes a dirty hot key's state into the current generation's
// map, and forgets the hot key.
func (sh *tableShard[V]) flushHot() {
	if sh.hot.dirty {
		sh.cur.states[sh.hot.key] = sh.hot.state
	}
	sh.hot = hotEntry[V]{}
}

// size returns how many keys the shard holds. The caller holds sh.mu.
func (sh *tableShard[V]) size() int {
	return len(sh.cur.states) + len(sh.prev.states)
}

// len returns how many keys the table holds. It is for tests.
func (t *keyTable[V]) len() int {
	total := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		total += sh.size()
		sh.mu.Unlock()
	}
	return total
}

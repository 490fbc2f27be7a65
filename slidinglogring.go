package ratelimit

// entryLog is one key's sliding log: the entries taken within the window,
// oldest first, in a ring buffer that grows as needed, and their sum. A
// copy shares the ring with the original, so a change to the entries is
// followed by a write of the copy (see keyTable), which the limiter makes
// under its shard's lock.
type entryLog struct {
	ring []logEntry // a power of two long, or nil; the entries are ring[head], ...
	head int        // index of the oldest entry in ring
	n    int        // how many entries ring holds
	sum  int64      // units of the n entries
	end  int64      // when the newest entry leaves: its time plus the window it was written with
}

// logEntry is the units one call took at one time (ns on the limiter's
// time base).
type logEntry struct {
	at    int64
	units int64
}

// recycleLog empties the log of a key its table drops, keeping its ring for
// a new key of the shard to take (see keyTable.recycling), and reports
// whether there is a ring to keep.
func recycleLog(lg entryLog) (entryLog, bool) {
	return entryLog{ring: lg.ring}, lg.ring != nil
}

// at returns the i-th oldest entry, 0 <= i < lg.n.
func (lg *entryLog) entry(i int) *logEntry {
	return &lg.ring[(lg.head+i)&(len(lg.ring)-1)]
}

// sweep drops the entries that have left the window at now: those taken
// at or before now - window.
func (lg *entryLog) sweep(now, window int64) {
	for lg.n > 0 {
		e := &lg.ring[lg.head]
		if e.at > now-window {
			return
		}
		lg.sum -= e.units
		lg.head = (lg.head + 1) & (len(lg.ring) - 1)
		lg.n--
	}
	lg.head = 0
}

// add appends an entry of units taken at now, or, on a log of limit
// entries or more (only a Settle's units get there), adds them to the
// newest entry, whose time moves to now: a log never holds more entries
// than its limit, and units are never counted for less time than their
// window. The ring doubles when full.
func (lg *entryLog) add(now, units, limit int64) {
	lg.sum += units
	if int64(lg.n) >= limit && lg.n > 0 {
		e := lg.entry(lg.n - 1)
		e.at, e.units = now, e.units+units
		return
	}
	if lg.n == len(lg.ring) {
		lg.grow()
	}
	*lg.entry(lg.n) = logEntry{at: now, units: units}
	lg.n++
}

// grow doubles the ring (to 1 entry from none), oldest entry first.
func (lg *entryLog) grow() {
	ring := make([]logEntry, max(2*len(lg.ring), 1))
	for i := 0; i < lg.n; i++ {
		ring[i] = *lg.entry(i)
	}
	lg.ring, lg.head = ring, 0
}

// giveBack takes units off the newest entries taken at or before bound,
// newest first, until units are given back or no such entry is left, and
// drops the entries left empty.
func (lg *entryLog) giveBack(units, bound int64) {
	emptied := false
	for i := lg.n - 1; i >= 0 && units > 0; i-- {
		e := lg.entry(i)
		if e.at > bound {
			continue
		}
		take := min(e.units, units)
		e.units -= take
		lg.sum -= take
		units -= take
		emptied = emptied || e.units == 0
	}
	if !emptied {
		return
	}
	kept := 0
	for i := 0; i < lg.n; i++ {
		if e := *lg.entry(i); e.units > 0 {
			*lg.entry(kept) = e
			kept++
		}
	}
	lg.n = kept
	if kept == 0 {
		lg.head = 0
	}
}

// leaves returns when enough of the oldest entries have left for need
// units (1 <= need <= lg.sum) to have gone: the time the entry that
// completes them was taken, plus window.
func (lg *entryLog) leaves(need, window int64) int64 {
	for i := 0; i < lg.n; i++ {
		e := lg.entry(i)
		if need -= e.units; need <= 0 {
			return e.at + window
		}
	}
	return lg.entry(lg.n-1).at + window
}

// newest returns the time of the newest entry; lg.n > 0.
func (lg *entryLog) newest() int64 { return lg.entry(lg.n - 1).at }

package redisbatch

// The call format of the batch script: what a call of it sends and what
// it returns. This is its one description; the encoder (encode.go), the
// reply's reader (record.go) and the Lua frame (scripts/batch.lua, which
// points here) follow it. The state each kind keeps under its keys is
// described in the kind's own Lua file, and what holds for every kind
// (numbers, absent keys, a clock that steps back) in scripts/prelude.lua.
//
// A script of the caller's clock takes one more argument before all of
// these: now, whole µs of Unix time below 2^52, which it takes off ARGV
// before the arguments below are read (scripts/time_caller.lua).
//
//	ARGV[1]   R, the number of requests, >= 1; or -R for the compact form,
//	          R Allows of one check each on limit 1 (S = 1), whose only
//	          argument is their cost n (no c, no s): a plain limiter's batch;
//	          when R > 1 and only one argument follows the limit, it is the
//	          cost of every request; for a limit of kind 'c', R requests of
//	          one check each on it, of two arguments each: an Allow's cost
//	          and lease, or 'R' or 'E' and the lease of a Release or Extend
//	ARGV[2]   S, the number of limits the checks below refer to, >= 1
//	then, for each limit, three arguments:
//	  kind    't' token bucket, 'g' GCRA, 'w' fixed window; 'T', 'G' a
//	          token bucket or GCRA that keeps its interval (and capacity)
//	          with each key's state, for a policy chosen per key: a key
//	          written at another interval keeps the units it has used,
//	          converted to this one and rounded up, and is written so by
//	          its next call, whatever that decides; 'c' units in flight,
//	          each held by a lease until it is released or expires; 'l'
//	          a sliding log: at most limit units in any window; 's' a
//	          sliding-window counter; 'k' a
//	          count in windows of a calendar, whose bounds the client
//	          computes
//	  limit   capacity or limit: whole units, 1 <= limit <= 2^52 ('c': the
//	          most units in flight, 1 <= limit <= 65536)
//	  param   't', 'g', 'T', 'G': whole microseconds per unit; 'w', 'l':
//	          the window in whole milliseconds; 's': the window W in whole
//	          milliseconds, 2W at most 2^52 µs; 'c': a lease's TTL in whole
//	          microseconds, >= 1000; 'k': the text "prev:start:end:next",
//	          in µs of Unix time, prev < start < end < next: the windows the
//	          client's clock is in (start to end) and on either side of it.
//	          The window that holds the server's now is the one every
//	          check of that limit counts in; a server time outside all three
//	          (the clocks more than a window apart) fails the call with
//	          an error before anything is written
//	then, for each request in order, one of five kinds:
//	  an Allow:
//	    c       its number of checks, >= 1; the request is allowed only if
//	            every check allows it, and then every check takes its cost
//	            (all or nothing)
//	    then, for each check, two arguments and one key, the next of KEYS:
//	      s       the number of its limit, 1 to S
//	      n       cost, 0 <= n <= limit; 0 only reads
//	    and, for a check of kind 'c', a third argument:
//	      lease   the name of the lease that n > 0 takes, which its key
//	              keeps it under: unique among every lease the key may
//	              ever hold, without ':', never "u", "e" or "x" ("" when n
//	              is 0)
//	  a Settle, which replaces the units an allowed request took by its
//	  true cost on every check, or on none:
//	    'S', c, age, tokttl
//	      age     µs since the units were taken, or -1 when not known
//	      tokttl  ms, > 0 when one more key follows the checks' keys: a
//	              token key, which the Settle creates with PX tokttl and
//	              which, when it is there already, makes the Settle change
//	              nothing; 0 without
//	    then, for each check, three arguments and one key:
//	      s       the number of its limit
//	      d       cost minus taken, whole units, |d| <= 2^52: > 0 takes d
//	              more (into debt if need be), < 0 gives -d back (never
//	              above full; a window only when it had opened age µs ago or
//	              earlier; a log to its newest entries taken age µs ago or
//	              earlier, or to any with age -1)
//	      m       the most debt d > 0 may leave, whole units, 0 <= m <= 2^52:
//	              a key owes at most m units beyond empty ('t', 'g', 'T',
//	              'G': its tat at most (limit + m) × interval µs ahead of
//	              now) or counts at most limit + m ('w', 'l', 'k'; 's': in
//	              the window open now), and one that owes more already stays
//	              as it is
//	  a Reset, which empties every check's key, or none:
//	    'X', c, then for each check, one argument (s) and one key
//	  a Release or an Extend of one lease, a request of one check of kind
//	  'c' (of any limit of that kind; an Extend's gives the lease's TTL):
//	    'R' or 'E', s, lease, and one key
//	    a Release drops the lease; an Extend moves its expiry to now + TTL,
//	    or, when it holds nothing any more (it expired, or is not there),
//	    drops it and changes nothing else
//	  the checks of one request are on different keys: each reads its key
//	  before any of them writes
//
//	Returns one binary string: a record per request, in order, with nothing
//	between them, so that no number is formatted as text. An answered
//	request's record is, for each of its checks in order, 25 bytes, or 33
//	with next_unit: a first byte, allowed (1 or 0: the request's, the same
//	for all its checks) plus 2 when next_unit follows; then remaining (whole
//	units), retry_after and reset_after (µs) and, when the first byte says
//	so, next_unit (µs), each a big-endian signed 64-bit integer. A check
//	that allows on its own reports 0 for retry_after; when the request is
//	denied it reports what it holds, since nothing was taken from it.
//	next_unit, the time until one unit more than remaining can have been
//	taken whatever the calls made meanwhile, is told by an Allow's check of
//	kind 'l' or 's' on a key that holds units, and of kind 'k' on a window
//	that counts none (the time until the window open now ends); no other
//	record carries it (see each kind's state for its value). A request with a key that does not hold
//	the state its check writes gets a refusal instead: the byte 255, the
//	number of that check from 1 (one byte), the length of the reason (two
//	bytes, big-endian) and the reason's text; it changes nothing, and the
//	requests after it are decided as usual. A Settle's record is
//	(1, remaining, 0, reset_after) per check, as the keys are after it (after
//	the earlier Settle, when its token was there); a Reset's is
//	(1, limit, 0, 0) per check. A Settle changes nothing on a 'c' check:
//	units in flight come back by a Release. A Release's record is
//	(held, 0, 0, 0), held being 1 when the lease held units until then and
//	0 when it had expired or was not there; an Extend's is (1, 0, 0, 0) when
//	it renewed the lease and (0, 0, 0, 0) when the lease held nothing.
//	A 'c' check's remaining is the units free, its retry_after the time
//	until enough leases expire for n to fit (the earliest expiry when one
//	lease is enough), and its reset_after the time until every lease has
//	expired (0 with none).
//
// A script holds the server while it runs: callers bound R.

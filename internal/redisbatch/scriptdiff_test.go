package redisbatch

import (
	"context"
	"flag"
	"hash/fnv"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The old-versus-new differential of the batch script: random batches of
// every kind, form, op and clock, made by the Sender's own encoder, go to
// the frozen script testdata/batch_v0.lua and to the script under test,
// each on a miniredis of its own, both on one virtual clock; their replies
// must be the same bytes, and every key the two servers hold after each
// batch the same type, value and TTL. Its full size is the acceptance run
// of a change of the Lua:
//
//	go test ./internal/redisbatch -soak -timeout 3h -run 'TestScriptDiff'
//
// -diffseed N runs other batches, and -diffbatches N runs N batches per
// kind.

// diffSeed varies the differential's random batches.
var diffSeed = flag.Uint64("diffseed", 1, "the seed of the script differential's random batches")

// diffBatches, when above 0, is the number of batches per kind of
// TestScriptDiff, whatever -soak says: a run sized to the time at hand.
var diffBatches = flag.Int("diffbatches", 0, "the batches per kind of TestScriptDiff (0: as -soak says)")

// The lines of the frozen script that read the server's TIME, and the
// lines that replaced them in the script of the caller's clock, as the
// root package made it before the scripts were assembled from their files:
// the differential makes the caller's clock of the frozen script so. The
// scripts under test are assembled (see Assemble), never edited.
const (
	timeLines   = "local t = redis.call('TIME')\nlocal now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
	callerLines = `local now = ARGV[1]
if type(now) ~= 'string' or #now > 16 or not string.find(now, '^%d+$') or tonumber(now) >= 4503599627370496 then
  return redis.error_reply('ratelimit batch script: the caller\'s time ' .. tostring(now) .. ' is not whole microseconds from 0 to 2^52')
end
now = tonumber(now)
table.remove(ARGV, 1)
`
)

// bothClocks returns the frozen batch script src in its two time sources:
// src, and src with callerLines for timeLines.
func bothClocks(t testing.TB, src string) scripts {
	t.Helper()
	require.Equal(t, 1, strings.Count(src, timeLines), "the script reads TIME once, in the lines the caller's clock replaces")
	return scripts{server: src, caller: strings.Replace(src, timeLines, callerLines, 1)}
}

// scriptFiles are the library's Lua files, which the scripts under test
// are assembled from.
var scriptFiles = os.DirFS("../../scripts")

// assembled returns the batch script of kinds on both clocks, assembled
// from scriptFiles.
func assembled(t testing.TB, kinds ...LuaKind) scripts {
	t.Helper()
	server, err := Assemble(scriptFiles, ServerTime, kinds...)
	require.NoError(t, err)
	caller, err := Assemble(scriptFiles, CallerTime, kinds...)
	require.NoError(t, err)
	return scripts{server: server, caller: caller}
}

// readScript returns the text of the file at path.
func readScript(t testing.TB, path string) string {
	t.Helper()
	src, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(src)
}

// oldScript returns the frozen script, the differential's reference.
func oldScript(t testing.TB) scripts {
	return bothClocks(t, readScript(t, "testdata/batch_v0.lua"))
}

// scriptUnderTest returns the script the differential compares with the
// frozen one: the batch script of every kind, assembled on both clocks as
// the root package assembles it.
func scriptUnderTest(t testing.TB) scripts {
	return assembled(t, LuaKinds()...)
}

// seedOf returns a stream's seed, from its name.
func seedOf(name string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return h.Sum64()
}

// tally adds up what a test's streams found, and reports it when they are
// all done.
type tally struct {
	mu                           sync.Mutex
	streams, batches, mismatched int
	start                        time.Time
}

// newTally returns a tally that logs its sum when t and its subtests end,
// as "what".
func newTally(t *testing.T, what string) *tally {
	y := &tally{start: time.Now()}
	t.Cleanup(func() {
		t.Logf("%d mismatches in %d batches %s (%d streams, %d batches in all) in %s",
			y.mismatched, y.batches/max(1, y.streams), what, y.streams, y.batches, time.Since(y.start).Round(time.Millisecond))
	})
	return y
}

// check runs n batches of a stream over kinds and shape of old against
// new, logs what it sent and found, and fails t on any mismatch.
func (y *tally) check(t *testing.T, old, new scripts, kinds []diffKind, shape func(*stream) []diffKind, n int) {
	start := time.Now()
	s := newStream(t, seedOf(t.Name()), old, new, kinds, shape)
	s.run(n)
	st := s.stats
	t.Logf("%d mismatches in %d batches (%d compact, %d on the caller's clock, %d failed calls; %d requests: %d Allows, %d Settles, %d Resets, %d Releases, %d Extends; records: %d allowed, %d not, %d refused) in %s",
		st.mismatched, st.batches, st.compact, st.caller, st.errors, st.requests, st.ops[Allow], st.ops[Settle], st.ops[Reset], st.ops[Release], st.ops[Extend],
		st.allowed, st.denied, st.refused, time.Since(start).Round(time.Millisecond))
	y.mu.Lock()
	y.streams++
	y.batches += st.batches
	y.mismatched += st.mismatched
	y.mu.Unlock()
	if st.mismatched > 0 {
		t.Errorf("the script under test decides unlike testdata/batch_v0.lua in %d of %d batches; the first:\n%s",
			st.mismatched, st.batches, strings.Join(s.mismatches, "\n"))
	}
}

// TestScriptDiff sends random batches of each kind, in the compact and
// general forms, of Allows (costs 0 to the limit + 1), Settles (with an
// age, a token, a most debt), Resets, and Releases and Extends of leases,
// on the server's clock and the caller's, over keys that are absent, held
// and foreign, to the frozen script and to the script under test, and
// checks that their replies and keys are the same after every batch.
func TestScriptDiff(t *testing.T) {
	t.Parallel()
	old, new := oldScript(t), scriptUnderTest(t)
	y := newTally(t, "per kind")
	n := sized(1_000, 200_000)
	if *diffBatches > 0 {
		n = *diffBatches
	}
	for _, k := range diffKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			y.check(t, old, new, []diffKind{k}, one, n)
		})
	}
}

// TestScriptDiffOwnKinds does as TestScriptDiff with the script of each
// kind alone, which a limiter of that kind sends.
func TestScriptDiffOwnKinds(t *testing.T) {
	t.Parallel()
	old := oldScript(t)
	y := newTally(t, "per kind, on its own script")
	n := sized(500, 200_000)
	if *diffBatches > 0 {
		n = *diffBatches
	}
	for _, k := range diffKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			y.check(t, old, ownScript(t, k.kind), []diffKind{k}, one, n)
		})
	}
}

// ownScript returns the batch script of kinds alone, on both clocks.
func ownScript(t testing.TB, kinds ...Kind) scripts {
	t.Helper()
	lua, ok := LuaKindsOf(kinds...)
	require.True(t, ok, "kinds %q", kinds)
	return assembled(t, lua...)
}

// TestScriptDiffPairs does as TestScriptDiff for every pair of kinds, a
// kind with itself included, as requests of two checks (a Composite of two
// parts), in either order, on the script of the two kinds alone, which
// such a Composite sends.
func TestScriptDiffPairs(t *testing.T) {
	t.Parallel()
	old := oldScript(t)
	y := newTally(t, "per pair")
	n := sized(100, 5_000)
	for i, a := range diffKinds {
		for _, b := range diffKinds[i:] {
			t.Run(string(a.kind)+string(b.kind), func(t *testing.T) {
				t.Parallel()
				y.check(t, old, ownScript(t, a.kind, b.kind), []diffKind{a, b}, both, n)
			})
		}
	}
}

// TestScriptDiffTriples does as TestScriptDiff for requests of three
// checks of any kinds.
func TestScriptDiffTriples(t *testing.T) {
	t.Parallel()
	old, new := oldScript(t), scriptUnderTest(t)
	y := newTally(t, "of three checks")
	y.check(t, old, new, diffKinds, three, sized(300, 20_000))
}

// TestScriptDiffFindsAChangedScript shows that the differential fails a
// script that differs from the frozen one by a single change: a copy of it
// with one comparison or number changed, for each of several kinds,
// decides unlike it within a few batches of that kind.
func TestScriptDiffFindsAChangedScript(t *testing.T) {
	t.Parallel()
	src := readScript(t, "testdata/batch_v0.lua")
	old := bothClocks(t, src)
	kinds := make(map[Kind]diffKind, len(diffKinds))
	for _, d := range diffKinds {
		kinds[d.kind] = d
	}
	for _, c := range []struct {
		name, from, to string
		kind           Kind
	}{
		// The general form's token bucket: a full bucket denies its whole capacity.
		{"bucket-denies-at-capacity", "local denied = n > 0 and new_tat - now > tau", "local denied = n > 0 and new_tat - now >= tau", TokenBucketWithInterval},
		// The compact form's fast path: a window counts one unit more.
		{"window-fast-path-counts-more", "call('INCRBY', key, format('%d', n))", "call('INCRBY', key, format('%d', n + 1))", FixedWindow},
		// The calendar window: a denial's reset_after is 1 µs longer.
		{"calendar-denial-resets-later", "return false, max(0, limit - count), left, left", "return false, max(0, limit - count), left, left + 1", CalendarWindow},
		// Concurrency: a first lease expires 1 µs later.
		{"lease-expires-later", "local xs = string.format('%d', now + c.param)", "local xs = string.format('%d', now + c.param + 1)", Concurrency},
		// The sliding log: a log of limit - n entries denies n.
		{"log-denies-the-last-unit", "if sum + n <= limit then", "if sum + n < limit then", SlidingLog},
		// The sliding counter: a counted key lives 1 ms longer.
		{"counter-expires-later", "cur, x = cur + n, s + 2 * w", "cur, x = cur + n, s + 2 * w + 1000", SlidingCounter},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, 1, strings.Count(src, c.from), "the change is made at one place of batch_v0.lua: pick another when it no longer holds it once")
			changed := bothClocks(t, strings.Replace(src, c.from, c.to, 1))
			s := newStream(t, seedOf(t.Name()), old, changed, []diffKind{kinds[c.kind]}, one)
			ctx := context.Background()
			for i := 0; i < 500 && s.stats.mismatched == 0; i++ {
				s.batch(ctx, i)
			}
			require.Positive(t, s.stats.mismatched, "a changed script passes %d batches of the differential", s.stats.batches)
			t.Logf("found after %d batches:\n%s", s.stats.batches, s.mismatches[0])
		})
	}
}

package redisbatch

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAssembleConcatenatesEachFileOnceInOrder(t *testing.T) {
	fsys := fstest.MapFS{
		"time_server.lua":    {Data: []byte("-- server\n")},
		"time_caller.lua":    {Data: []byte("-- caller\n")},
		"prelude.lua":        {Data: []byte("-- prelude\n")},
		"batch.lua":          {Data: []byte("-- frame\n")},
		"shared.lua":         {Data: []byte("-- shared\n")},
		"a.lua":              {Data: []byte("-- a\n")},
		"b.lua":              {Data: []byte("-- b\n")},
		"shared_fast.lua":    {Data: []byte("-- fast\n")},
		"fast_pack.lua":      {Data: []byte("-- pack\n")},
		"no_newline_end.lua": {Data: []byte("-- no newline")},
	}
	a := LuaKind{Kinds: []Kind{"a"}, Files: []string{"shared.lua", "a.lua"}, Fast: "shared_fast.lua"}
	b := LuaKind{Kinds: []Kind{"b"}, Files: []string{"shared.lua", "b.lua"}, Fast: "shared_fast.lua"}
	src, err := Assemble(fsys, CallerTime, a, b)
	require.NoError(t, err)
	assert.Equal(t, "local script = \"ratelimit batch script\"\n-- caller\n-- prelude\n-- fast\n-- pack\n-- frame\n-- shared\n-- a\n-- b\nreturn run()\n", src)
	src, err = Assemble(fsys, CallerTime, LuaKind{Kinds: []Kind{"b"}, Files: []string{"b.lua"}})
	require.NoError(t, err)
	assert.Equal(t, "local script = \"ratelimit batch script\"\n-- caller\n-- prelude\n-- frame\n-- b\nreturn run()\n", src, "no fast path, no fast_pack.lua")
	src, err = AssembleTimed(fsys, ServerTime, "a.lua", "x script")
	require.NoError(t, err)
	assert.Equal(t, "local script = \"x script\"\n-- server\n-- a\n", src)

	_, err = Assemble(fsys, ServerTime)
	assert.ErrorContains(t, err, "no kind")
	_, err = Assemble(fsys, TimeSource(7), a)
	assert.ErrorContains(t, err, "no time source 7")
	_, err = Assemble(fsys, ServerTime, LuaKind{Kinds: []Kind{"z"}})
	assert.ErrorContains(t, err, "no Lua file")
	_, err = Assemble(fsys, ServerTime, LuaKind{Kinds: []Kind{"z"}, Files: []string{"missing.lua"}})
	assert.ErrorContains(t, err, "missing.lua")
	_, err = Assemble(fsys, ServerTime, LuaKind{Kinds: []Kind{"z"}, Files: []string{"no_newline_end.lua"}})
	assert.ErrorContains(t, err, "no_newline_end.lua does not end in a newline")
	_, err = AssembleTimed(fsys, TimeSource(-1), "a.lua", "x")
	assert.ErrorContains(t, err, "no time source -1")
}

// TestEveryKindsScriptAssemblesAndOnlyTheServersReadsTIME assembles the
// batch script of each kind alone and of all of them, on both clocks: each
// registers its kinds, and only the script of the server's clock holds a
// call of TIME, once.
func TestEveryKindsScriptAssemblesAndOnlyTheServersReadsTIME(t *testing.T) {
	sets := [][]LuaKind{LuaKinds()}
	for _, k := range LuaKinds() {
		sets = append(sets, []LuaKind{k})
	}
	for _, set := range sets {
		s := assembled(t, set...)
		for _, k := range set {
			for _, kind := range k.Kinds {
				assert.Contains(t, s.server, "\nkinds."+string(kind)+" = ", "kind %s registers itself", kind)
			}
		}
		assert.Equal(t, 1, strings.Count(s.server, "redis.call('TIME')"), "the server's clock reads TIME once")
		assert.NotContains(t, s.caller, "'TIME'")
		assert.NotContains(t, s.caller, "\"TIME\"")
		assert.True(t, strings.HasSuffix(s.server, "\nreturn run()\n"))
	}
}

// TestEachKindsScriptStaysWithinItsBudget counts the top-level functions
// and other locals of the script of each kind alone and of every kind: a
// call's fixed cost is mostly the closures its chunk makes, and Lua 5.1
// allows 200 locals in a chunk. The budgets are today's counts, so that an
// edit that adds to a kind's script does it on purpose.
func TestEachKindsScriptStaysWithinItsBudget(t *testing.T) {
	budget := map[Kind][2]int{ // functions, other locals
		TokenBucket: {18, 12}, GCRA: {17, 12}, FixedWindow: {14, 12}, Concurrency: {29, 15},
		SlidingLog: {24, 13}, CalendarWindow: {16, 12}, SlidingCounter: {21, 14},
	}
	count := func(src string) (funcs, locals int) {
		for _, l := range strings.Split(src, "\n") {
			if strings.HasPrefix(l, "local function ") {
				funcs++
			} else if strings.HasPrefix(l, "local ") {
				locals++
			}
		}
		return funcs, locals
	}
	for _, k := range LuaKinds() {
		s := assembled(t, k)
		funcs, locals := count(s.server)
		b := budget[k.Kinds[0]]
		assert.LessOrEqual(t, funcs, b[0], "top-level functions of the script of %s", k.Kinds[0])
		assert.LessOrEqual(t, locals, b[1], "other top-level locals of the script of %s", k.Kinds[0])
	}
	funcs, locals := count(assembled(t, LuaKinds()...).server)
	assert.LessOrEqual(t, funcs+locals, 150, "the script of every kind stays well below Lua's 200 locals")
}

package ratelimit

import (
	"embed"
	"io/fs"
	"strconv"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
	"github.com/redis/go-redis/v9"
)

// scriptFiles holds the Lua files of scripts/, which every Redis script of
// the package is assembled from, at init and never edited (see
// redisbatch.Assemble): time_server.lua and time_caller.lua, the clocks;
// prelude.lua and batch.lua, the batch script's frame; a file per kind;
// fleet.lua and the policy table's.
//
//go:embed scripts/*.lua
var scriptFiles embed.FS

// luaFiles returns scriptFiles' scripts/ directory.
func luaFiles() fs.FS {
	sub, err := fs.Sub(scriptFiles, "scripts")
	if err != nil {
		return scriptFiles // unreachable: "scripts" is a valid path
	}
	return sub
}

// batchLua is the batch script of every kind on the server's TIME, which
// makes every Redis limiter's decisions; batchCallerLua is the one of the
// limiters built WithCallerClock, which takes now as its first argument and
// never calls TIME.
var (
	batchLua       = failing(redisbatch.Assemble(luaFiles(), redisbatch.ServerTime, redisbatch.LuaKinds()...))
	batchCallerLua = failing(redisbatch.Assemble(luaFiles(), redisbatch.CallerTime, redisbatch.LuaKinds()...))
)

// batchScript and batchCallerScript are batchLua and batchCallerLua with
// their SHA1s, as the Senders send them.
var (
	batchScript       = redisbatch.NewScript(batchLua)
	batchCallerScript = redisbatch.NewScript(batchCallerLua)
)

// fleetScript keeps a fleet's membership: one heartbeat is one call of it;
// fleetCallerScript is the one of a Fleet whose FleetConfig has a
// CallerClock, which takes now, in µs of Unix time, as its first argument
// and never calls TIME. go-redis sends each with EVALSHA, and with EVAL
// when the server does not have it cached.
var (
	fleetScript       = redis.NewScript(failing(redisbatch.AssembleTimed(luaFiles(), redisbatch.ServerTime, "fleet.lua", "ratelimit fleet script")))
	fleetCallerScript = redis.NewScript(failing(redisbatch.AssembleTimed(luaFiles(), redisbatch.CallerTime, "fleet.lua", "ratelimit fleet script")))
)

// policyTableScript is the script every write of a PolicyTable makes: it
// changes the table, bumps its version and publishes the change;
// policyTableCallerScript is the one of a PolicyTable whose
// PolicyTableConfig has a CallerClock, which takes now, in µs of Unix
// time, as its first argument and never calls TIME. policyTableReadScript
// reads what changed in the table since a replica's version. Each is sent
// by its SHA1.
var (
	policyTableScript       = redis.NewScript(failing(redisbatch.AssembleTimed(luaFiles(), redisbatch.ServerTime, "policytable.lua", "ratelimit policy table script")))
	policyTableCallerScript = redis.NewScript(failing(redisbatch.AssembleTimed(luaFiles(), redisbatch.CallerTime, "policytable.lua", "ratelimit policy table script")))
	policyTableReadScript   = redis.NewScript(luaFile("policytable_read.lua"))
)

// failing returns src, or, when err is not nil, a script that fails every
// call with err's text, so that a script that cannot be assembled fails
// its callers' calls (a test sees that every script assembles) rather
// than the program's start.
func failing(src string, err error) string {
	if err != nil {
		return "return redis.error_reply(" + strconv.Quote("ratelimit: "+err.Error()) + ")\n"
	}
	return src
}

// luaFile returns the text of the file name of scripts/, or a script that
// fails every call when it cannot be read (see failing).
func luaFile(name string) string {
	src, err := fs.ReadFile(luaFiles(), name)
	return failing(string(src), err)
}

// kindScripts holds the batch script of each kind alone, on each clock,
// built at init and never changed: the script of a limiter of that kind,
// under each of the kind's names (a token bucket's TokenBucket and
// TokenBucketWithInterval share one).
var kindScripts = newKindScripts()

// clockScripts is a script on the server's clock and on the caller's.
type clockScripts struct {
	server, caller redisbatch.Script
}

// newKindScripts returns the scripts of kindScripts.
func newKindScripts() map[redisbatch.Kind]clockScripts {
	m := make(map[redisbatch.Kind]clockScripts)
	for _, k := range redisbatch.LuaKinds() {
		s := clockScripts{
			server: redisbatch.NewScript(failing(redisbatch.Assemble(luaFiles(), redisbatch.ServerTime, k))),
			caller: redisbatch.NewScript(failing(redisbatch.Assemble(luaFiles(), redisbatch.CallerTime, k))),
		}
		for _, kind := range k.Kinds {
			m[kind] = s
		}
	}
	return m
}

// batchScriptOf returns the batch script of a Sender whose requests are
// on limits and on limits of the kinds more, on clock (nil: the server's
// TIME): the script of those kinds alone, or of every kind when it knows
// none of them (no limits and no kinds: each request carries a limit of
// any kind). The script of one kind is kindScripts'; one of several (a
// Composite's parts) is assembled here, once per Sender.
func batchScriptOf(limits []*redisbatch.Limit, clock Clock, more ...redisbatch.Kind) redisbatch.Script {
	t, all := redisbatch.ServerTime, batchScript
	if clock != nil {
		t, all = redisbatch.CallerTime, batchCallerScript
	}
	kinds := make([]redisbatch.Kind, 0, len(limits)+len(more))
	for _, l := range limits {
		kinds = append(kinds, l.Kind)
	}
	for _, k := range more {
		if k != "" {
			kinds = append(kinds, k)
		}
	}
	lua, ok := redisbatch.LuaKindsOf(kinds...)
	switch {
	case !ok || len(lua) == 0:
		return all
	case len(lua) == 1:
		s := kindScripts[kinds[0]]
		if clock != nil {
			return s.caller
		}
		return s.server
	}
	return redisbatch.NewScript(failing(redisbatch.Assemble(luaFiles(), t, lua...)))
}

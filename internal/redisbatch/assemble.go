package redisbatch

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
)

// TimeSource names the clock a script decides on: the file that sets its
// now, which is the first part of every script assembled from the files of
// scripts/.
type TimeSource int

const (
	// ServerTime reads the server's TIME (time_server.lua), the only TIME
	// any script of the library reads.
	ServerTime TimeSource = iota
	// CallerTime takes now, whole µs of Unix time below 2^52, off ARGV[1]
	// (time_caller.lua), and never reads the server's time.
	CallerTime
)

// file returns the name of t's file.
func (t TimeSource) file() (string, error) {
	switch t {
	case ServerTime:
		return "time_server.lua", nil
	case CallerTime:
		return "time_caller.lua", nil
	}
	return "", fmt.Errorf("redisbatch: no time source %d", int(t))
}

// LuaKind is what the batch script needs of a kind: the Kinds it
// registers, the files that hold its functions (a file two kinds share, as
// the token bucket and GCRA share tat.lua, is assembled once), and the
// file of its compact form's fast path, "" when it keeps none; and whether
// its checks hold leases.
type LuaKind struct {
	Kinds []Kind
	Files []string
	Fast  string
	// Leases is true for a kind whose Allow's check takes Request.Lease,
	// and whose compact form also carries Releases and Extends of leases.
	Leases bool
}

// LuaKinds returns the Lua files of the seven kinds, in the order the
// script of every kind assembles them. The slice is new on every call.
func LuaKinds() []LuaKind {
	return []LuaKind{
		{Kinds: []Kind{TokenBucket, TokenBucketWithInterval}, Files: []string{"tat.lua", "bucket.lua"}, Fast: "tat_fast.lua"},
		{Kinds: []Kind{GCRA, GCRAWithInterval}, Files: []string{"tat.lua", "gcra.lua"}, Fast: "tat_fast.lua"},
		{Kinds: []Kind{FixedWindow}, Files: []string{"fixedwindow.lua"}, Fast: "fixedwindow_fast.lua"},
		{Kinds: []Kind{Concurrency}, Files: []string{"hash.lua", "concurrency.lua"}, Fast: "concurrency_fast.lua", Leases: true},
		{Kinds: []Kind{SlidingLog}, Files: []string{"hash.lua", "slidinglog.lua"}, Fast: "slidinglog_fast.lua"},
		{Kinds: []Kind{CalendarWindow}, Files: []string{"calendarwindow.lua"}, Fast: "calendarwindow_fast.lua"},
		{Kinds: []Kind{SlidingCounter}, Files: []string{"slidingcounter.lua"}, Fast: "slidingcounter_fast.lua"},
	}
}

// holdsLeases reports whether the LuaKind that registers kind says its
// checks hold leases (LuaKind.Leases); false for a kind no LuaKind
// registers.
func holdsLeases(kind Kind) bool {
	for _, l := range LuaKinds() {
		if slices.Contains(l.Kinds, kind) {
			return l.Leases
		}
	}
	return false
}

// LuaKindsOf returns the LuaKinds, among all, that register the kinds, in
// the order of LuaKinds and each once; false when a kind is not among
// them.
func LuaKindsOf(kinds ...Kind) ([]LuaKind, bool) {
	all := LuaKinds()
	need := make([]bool, len(all))
	for _, k := range kinds {
		found := false
		for i, l := range all {
			if slices.Contains(l.Kinds, k) {
				need[i], found = true, true
			}
		}
		if !found {
			return nil, false
		}
	}
	var out []LuaKind
	for i, l := range all {
		if need[i] {
			out = append(out, l)
		}
	}
	return out, true
}

// Assemble returns the batch script of kinds on the clock t, made of the
// files of fsys (the library's scripts/ directory) by concatenation alone,
// each file once, in this order: a line that names the script for its
// errors (see named), t's time file, prelude.lua, the kinds' fast paths
// and, when there is one, fast_pack.lua, which packs their records, the
// frame batch.lua, the kinds' files, and a last line that returns the
// frame's run(). It returns an error, and no script, for no
// kinds, an unknown time source, or a file fsys does not hold or that does
// not end in a newline.
func Assemble(fsys fs.FS, t TimeSource, kinds ...LuaKind) (string, error) {
	if len(kinds) == 0 {
		return "", errors.New("redisbatch: a batch script of no kind")
	}
	clock, err := t.file()
	if err != nil {
		return "", err
	}
	names := []string{clock, "prelude.lua"}
	fast := false
	for _, k := range kinds {
		if k.Fast != "" {
			names, fast = append(names, k.Fast), true
		}
	}
	if fast {
		names = append(names, "fast_pack.lua")
	}
	names = append(names, "batch.lua")
	for _, k := range kinds {
		if len(k.Files) == 0 {
			return "", fmt.Errorf("redisbatch: kinds %q have no Lua file", k.Kinds)
		}
		names = append(names, k.Files...)
	}
	var b strings.Builder
	named(&b, "ratelimit batch script")
	if err := concat(&b, fsys, names); err != nil {
		return "", err
	}
	b.WriteString("return run()\n")
	return b.String(), nil
}

// AssembleTimed returns the script of the file name of fsys on the clock
// t, which its errors call what (as "ratelimit fleet script"): the line
// that names it, t's time file, which sets now (µs of Unix time), then the
// file. A script of the caller's clock takes now off ARGV[1], so that the
// file reads its arguments from ARGV[1] on on either clock.
func AssembleTimed(fsys fs.FS, t TimeSource, name, what string) (string, error) {
	clock, err := t.file()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	named(&b, what)
	if err := concat(&b, fsys, []string{clock, name}); err != nil {
		return "", err
	}
	return b.String(), nil
}

// named writes the first line of a script, which sets script to what, the
// script's name in the errors it returns (time_caller.lua's).
func named(b *strings.Builder, what string) {
	fmt.Fprintf(b, "local script = %q\n", what)
}

// concat writes the files names of fsys to b, each once, in order.
func concat(b *strings.Builder, fsys fs.FS, names []string) error {
	seen := make(map[string]bool, len(names))
	for _, name := range names {
		if seen[name] {
			continue
		}
		seen[name] = true
		src, err := fs.ReadFile(fsys, name)
		if err != nil {
			return fmt.Errorf("redisbatch: assembling a script: %w", err)
		}
		if len(src) == 0 || src[len(src)-1] != '\n' {
			return fmt.Errorf("redisbatch: assembling a script: %s does not end in a newline", name)
		}
		b.Write(src)
	}
	return nil
}

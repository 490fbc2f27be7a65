package main

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/tools/go/packages"
)

// fixture is the test package: five files in a known graph, a kind test
// of every form, and a known API (see its files).
const fixture = "testdata/fixture"

// loadFixture loads every package of the fixture's module.
func loadFixture(t *testing.T) []*packages.Package {
	t.Helper()
	mode := packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes |
		packages.NeedTypesInfo | packages.NeedModule | packages.NeedImports
	pkgs, err := packages.Load(&packages.Config{Mode: mode, Dir: fixture}, "./...")
	require.NoError(t, err)
	for _, p := range pkgs {
		require.Empty(t, p.Errors, p.PkgPath)
	}
	return pkgs
}

// fixturePackage returns the package at the fixture's root.
func fixturePackage(t *testing.T, pkgs []*packages.Package) *packages.Package {
	t.Helper()
	for _, p := range pkgs {
		if p.PkgPath == "example.com/fixture" {
			return p
		}
	}
	require.FailNow(t, "no root package in the fixture")
	return nil
}

func TestFileGraphHasAnArrowPerPairOfFilesAndItsCycleHasOneBackArrow(t *testing.T) {
	g := graphOf(fixturePackage(t, loadFixture(t)))
	assert.Equal(t, []string{"a.go", "b.go", "c.go", "kinds.go", "switch.go"}, g.files)
	arrows := make([][2]string, 0, len(g.arrows))
	for e := range g.arrows {
		arrows = append(arrows, e)
	}
	assert.ElementsMatch(t, [][2]string{
		{"a.go", "b.go"}, {"b.go", "a.go"}, {"b.go", "kinds.go"},
		{"c.go", "a.go"}, {"c.go", "kinds.go"}, {"switch.go", "kinds.go"},
	}, arrows)
	// c.go uses TokenBucket and its field n: one arrow of two uses.
	assert.Equal(t, 2, g.arrows[[2]string{"c.go", "kinds.go"}])
	assert.Equal(t, [][2]string{{"b.go", "a.go"}}, g.back())
	assert.Equal(t, map[string][]added{"c.go": {{typ: "TokenBucket", method: "Extra"}}}, g.added)
}

func TestOrderPlacesSourcesFirstSinksLastAndBreaksACycleByTheFirstOfItsBestFiles(t *testing.T) {
	// w uses the cycle x -> y -> z -> x: w is a source; then x, y and z
	// score alike (one out, one in), and x, the first, goes on top, which
	// leaves z a sink and y a source.
	g := &fileGraph{
		files:  []string{"w.go", "x.go", "y.go", "z.go"},
		arrows: map[[2]string]int{{"w.go", "x.go"}: 1, {"x.go", "y.go"}: 1, {"y.go", "z.go"}: 1, {"z.go", "x.go"}: 1},
	}
	order, _ := g.order()
	assert.Equal(t, []string{"w.go", "x.go", "y.go", "z.go"}, order)
	assert.Equal(t, [][2]string{{"z.go", "x.go"}}, g.back())

	// A chain has no back arrow, whatever its files' names.
	chain := &fileGraph{
		files:  []string{"a.go", "b.go", "c.go"},
		arrows: map[[2]string]int{{"c.go", "b.go"}: 1, {"b.go", "a.go"}: 1},
	}
	order, _ = chain.order()
	assert.Equal(t, []string{"c.go", "b.go", "a.go"}, order)
	assert.Empty(t, chain.back())
}

func TestKindTestsAreFoundInEveryFormAndGroupedByFunction(t *testing.T) {
	pkgs := loadFixture(t)
	root, err := filepath.Abs(fixture)
	require.NoError(t, err)
	s := newKindScan(root, "example.com/fixture", pkgs)
	assert.Equal(t, "gt", s.letters, "the letters of the Kind constants")
	for _, p := range pkgs {
		s.scanGo(p)
	}
	require.NoError(t, s.scanLua(filepath.Join(root, "scripts", "batch.lua")))
	var got []string
	for _, site := range s.sites() {
		got = append(got, describe(site))
	}
	assert.Equal(t, []string{
		"scripts/batch.lua:3 (top-level): 1 Lua kind letter ('t'), 1 Lua kinds table entry ('g')",
		"scripts/batch.lua:8 state: 1 Lua kind letter ('g')",
		"scripts/batch.lua:15 kinds: 2 Lua kinds table entries ('t' 'g')",
		"switch.go:8 describe: 3 type switch cases (*TokenBucket *GCRA *RedisGCRA), 1 type assertion (*RedisGCRA)",
		"switch.go:29 parts.which: 2 nil tests of a kind's pointer (b g)",
		"switch.go:47 found: 1 nil test of a kind (*TokenBucket)",
		"switch.go:53 leased: 2 Kind constants (TokenBucket GCRA)",
	}, got)
}

func TestAllowlistNamesAFileAndAFunctionPerLine(t *testing.T) {
	allow := readAllow("# a comment\n\nswitch.go describe # why\nscripts/batch.lua (top-level)\nnot a site line\n")
	assert.Equal(t, map[string]bool{"switch.go describe": true, "scripts/batch.lua (top-level)": true}, allow)
	assert.NotEmpty(t, readAllow(allowed), "the embedded kindswitches.txt")
}

func TestAPICountsWhatGodocListsOfEachLibraryPackage(t *testing.T) {
	dirs, err := apiDirs(fixture)
	require.NoError(t, err)
	assert.Equal(t, []string{".", "internal/redisbatch"}, dirs, "not sub, a main package")

	c, err := countAPI(fixture, ".")
	require.NoError(t, err)
	assert.Equal(t, []string{"const Max", "func A", "func B", "func C", "type GCRA", "type Limiter", "type RedisGCRA", "type Shell", "type TokenBucket"}, c.names)
	// Shell.Settle is promoted from an unexported engine, as godoc shows
	// it; Limiter's unexported method is not counted.
	assert.Equal(t, []string{"Limiter.Allow (interface)", "Shell.Settle", "TokenBucket.Extra"}, c.methods)
	assert.Equal(t, 1, c.interfaces)

	c, err = countAPI(fixture, "internal/redisbatch")
	require.NoError(t, err)
	assert.Equal(t, []string{"const GCRA", "const Other", "const TokenBucket", "type Kind", "type Sender"}, c.names)
	assert.Equal(t, []string{"Sender.Do"}, c.methods)
}

func TestRunFailsOnlyAboveTheThresholdsItIsGiven(t *testing.T) {
	for _, c := range []struct {
		name   string
		args   []string
		status int
		says   string
	}{
		{"report only", nil, 0, "back arrows 1"},
		{"back arrows at the bound", []string{"-max-back", "1"}, 0, "back arrows 1"},
		{"back arrows above the bound", []string{"-max-back", "0"}, 1, "FAIL: 1 back arrows, more than -max-back 0"},
		// The embedded kindswitches.txt names none of the fixture's Go sites.
		{"kind tests outside the allowlist", []string{"-no-kind-switches"}, 1, "FAIL: kind tests outside kindswitches.txt"},
		{"a package of its own", []string{"-pkg", "internal/redisbatch"}, 0, "file graph of example.com/fixture/internal/redisbatch: files 1, arrows 0, back arrows 0"},
		{"unknown flag", []string{"-nope"}, 2, ""},
		{"no such package", []string{"-pkg", "nowhere"}, 2, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			status := run(append([]string{"-root", fixture}, c.args...), &out, &errs)
			assert.Equal(t, c.status, status, "stdout:\n%s\nstderr:\n%s", out.String(), errs.String())
			assert.Contains(t, out.String(), c.says)
		})
	}
}

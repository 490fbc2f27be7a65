// Command archcheck measures the shape of the ratelimit library's code: the
// file graph of a package, the places that tell the limiter kinds apart by
// hand, and the exported surface of every package. It prints a short text
// report, and fails above the thresholds it is given, so that CI can hold
// the code to them.
//
// Run it from its directory, on the repository two levels up:
//
//	go run . [-root ../..] [-pkg .] [-v] [-api] [-max-back N] [-no-kind-switches]
//
// What it reports:
//
//   - files: the non-test Go files of the package in -pkg (a directory
//     from -root; the root package by default).
//   - arrows: the ordered pairs (A, B) of two of those files such that A
//     uses something declared in B: a package-level func, type, const or
//     var, a method, or a field. A pair is one arrow however many uses it
//     has.
//   - back arrows: the files are put in one order, users above what they
//     use, by the greedy heuristic of Eades, Lin and Smyth for a small
//     feedback arc set: as long as files are left, every file that uses no
//     file left (a sink) is placed below all files left, above the sinks
//     placed earlier, and every file that no file left uses (a source) is
//     placed above them, below the sources placed earlier; when neither is
//     left, the file with the most arrows out minus arrows in (to files
//     left) is placed as a source. Files are visited in name order, and the
//     first of equals wins, so the order is the same on every run. A back
//     arrow is an arrow from a file to one above it: a use against the
//     order, which no order avoids without (at best) making another. The
//     report counts them and where they start (-v lists them).
//   - files that declare methods on a type another file of the package
//     declares, with their counts and the types (-v lists the methods).
//   - kind tests: places that tell the limiter kinds apart by hand, in the
//     Go packages of the root module and in scripts/*.lua: a type switch
//     case or type assertion on a limiter type (*TokenBucket and the 13
//     others); a nil test of a pointer field of a struct that holds
//     pointers to two kinds or more (a part of one of several kinds); a
//     comparison with, or a switch case on, a Kind constant of
//     internal/redisbatch; in Lua, a kind compared with a kind letter
//     (kind == 't'), and an entry of the kinds table under a letter. They
//     are grouped by function; the sites of kindswitches.txt are allowed,
//     and the report marks each other one with "!".
//   - the API of every package that has one (not main, examples, bench or
//     tools): its exported names (types, funcs with constructors, consts
//     and vars) and the methods of its exported types as godoc lists them
//     (promoted ones from unexported embedded types included), and the
//     methods its exported interfaces declare, counted among the methods
//     and given apart (-api lists them all).
//
// -max-back N fails the run (exit status 1) when the package has more
// than N back arrows; -no-kind-switches, when any kind test is outside the
// allowlist. Without them it never fails on what it measures.
package main

import (
	_ "embed"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
)

// allowed lists the sites (a file and a function) where kind tests may
// stay; see kindswitches.txt.
//
//go:embed kindswitches.txt
var allowed string

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are archcheck's flags.
type options struct {
	root, pkg     string
	verbose, api  bool
	maxBack       int
	noKindTests   bool
	allow         map[string]bool
	skipKindTests bool // for tests: the file graph and the API only
}

// run runs archcheck with args, writing its report to stdout and its
// errors to stderr, and returns its exit status: 0, 1 when a threshold is
// passed, 2 on a usage or load error.
func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("archcheck", flag.ContinueOnError)
	fl.SetOutput(stderr)
	o := options{allow: readAllow(allowed)}
	fl.StringVar(&o.root, "root", "../..", "the repository's root `directory`")
	fl.StringVar(&o.pkg, "pkg", ".", "the package `directory`, from -root, whose file graph is measured")
	fl.BoolVar(&o.verbose, "v", false, "list the back arrows and the methods declared in other files")
	fl.BoolVar(&o.api, "api", false, "list every exported name and method")
	fl.IntVar(&o.maxBack, "max-back", -1, "fail above `N` back arrows (-1: never)")
	fl.BoolVar(&o.noKindTests, "no-kind-switches", false, "fail on any kind test outside kindswitches.txt")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "archcheck: unexpected arguments %q\n", fl.Args())
		return 2
	}
	status, err := check(o, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "archcheck: %v\n", err)
		return 2
	}
	return status
}

// check measures what o asks, reports it to w, and returns 1 when a
// threshold of o is passed.
func check(o options, w io.Writer) (int, error) {
	root, err := filepath.Abs(o.root)
	if err != nil {
		return 0, err
	}
	mode := packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes |
		packages.NeedTypesInfo | packages.NeedModule | packages.NeedImports
	pkgs, err := packages.Load(&packages.Config{Mode: mode, Dir: root}, "./...")
	if err != nil {
		return 0, err
	}
	var module string
	var graphPkg *packages.Package
	dir := filepath.Join(root, o.pkg)
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			return 0, fmt.Errorf("%s: %v", p.PkgPath, p.Errors[0])
		}
		if p.Module != nil && p.Module.Dir == root && p.PkgPath == p.Module.Path {
			module = p.Module.Path
		}
		if len(p.GoFiles) > 0 && filepath.Dir(p.GoFiles[0]) == dir {
			graphPkg = p
		}
	}
	if module == "" {
		return 0, fmt.Errorf("no root package at %s", root)
	}
	if graphPkg == nil {
		// A package of another module (a nested one): loaded on its own.
		more, err := packages.Load(&packages.Config{Mode: mode, Dir: dir}, ".")
		if err != nil {
			return 0, err
		}
		if len(more) != 1 || len(more[0].Errors) > 0 || len(more[0].Syntax) == 0 {
			return 0, fmt.Errorf("no package at %s", dir)
		}
		graphPkg = more[0]
	}
	status := 0
	fmt.Fprintf(w, "archcheck of %s (%s)\n", module, root)

	g := graphOf(graphPkg)
	back := g.back()
	fmt.Fprintf(w, "\nfile graph of %s: files %d, arrows %d, back arrows %d\n", graphPkg.PkgPath, len(g.files), len(g.arrows), len(back))
	fmt.Fprintf(w, "  back arrows start in: %s\n", countsBy(back, func(e [2]string) string { return e[0] }))
	if o.verbose {
		for _, e := range back {
			fmt.Fprintf(w, "  back: %s -> %s\n", e[0], e[1])
		}
	}
	if o.maxBack >= 0 && len(back) > o.maxBack {
		fmt.Fprintf(w, "  FAIL: %d back arrows, more than -max-back %d\n", len(back), o.maxBack)
		status = 1
	}
	reportAdded(w, g, o.verbose)

	if !o.skipKindTests {
		s := newKindScan(root, module, pkgs)
		for _, p := range pkgs {
			s.scanGo(p)
		}
		lua, err := filepath.Glob(filepath.Join(root, "scripts", "*.lua"))
		if err != nil {
			return 0, err
		}
		for _, path := range lua {
			if err := s.scanLua(path); err != nil {
				return 0, err
			}
		}
		if reportKindTests(w, s, o.allow) > 0 && o.noKindTests {
			fmt.Fprintf(w, "  FAIL: kind tests outside kindswitches.txt (-no-kind-switches)\n")
			status = 1
		}
	}

	dirs, err := apiDirs(root)
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(w, "\nAPI (exported names; methods of exported types and interfaces, as godoc lists them):\n")
	for _, d := range dirs {
		c, err := countAPI(root, d)
		if err != nil {
			return 0, err
		}
		fmt.Fprintf(w, "  %-34s %4d names, %4d methods (%d of them of interfaces)\n", d, len(c.names), len(c.methods), c.interfaces)
		if o.api {
			for _, n := range c.names {
				fmt.Fprintf(w, "    %s\n", n)
			}
			for _, m := range c.methods {
				fmt.Fprintf(w, "    method %s\n", m)
			}
		}
	}
	return status, nil
}

// reportAdded reports the files of g that declare methods on another
// file's types.
func reportAdded(w io.Writer, g *fileGraph, verbose bool) {
	files := make([]string, 0, len(g.added))
	total := 0
	for f, m := range g.added {
		files = append(files, f)
		total += len(m)
	}
	sort.Strings(files)
	fmt.Fprintf(w, "files that declare methods on another file's type: %d files, %d methods\n", len(files), total)
	for _, f := range files {
		var types, methods []string
		for _, a := range g.added[f] {
			types = append(types, a.typ)
			methods = append(methods, a.typ+"."+a.method)
		}
		fmt.Fprintf(w, "  %s: %d (%s)\n", f, len(g.added[f]), strings.Join(unique(types), ", "))
		if verbose {
			fmt.Fprintf(w, "    %s\n", strings.Join(methods, " "))
		}
	}
}

// reportKindTests reports the kind tests s found, site by site, marking
// with "!" each site allow does not name, and returns how many those are.
func reportKindTests(w io.Writer, s *kindScan, allow map[string]bool) int {
	sites := s.sites()
	outside := 0
	for _, site := range sites {
		if !allow[site[0].site()] {
			outside++
		}
	}
	found := map[string]bool{}
	for _, site := range sites {
		found[site[0].site()] = true
	}
	var stale []string
	for site := range allow {
		if !found[site] {
			stale = append(stale, site)
		}
	}
	sort.Strings(stale)
	fmt.Fprintf(w, "\nkind tests: %d in %d functions, %d of them outside kindswitches.txt\n", len(s.tests), len(sites), outside)
	if len(stale) > 0 {
		fmt.Fprintf(w, "  kindswitches.txt names %d sites with no kind test (remove them): %s\n", len(stale), strings.Join(stale, "; "))
	}
	for _, site := range sites {
		mark := " "
		if !allow[site[0].site()] {
			mark = "!"
		}
		fmt.Fprintf(w, " %s %s\n", mark, describe(site))
	}
	return outside
}

// countsBy returns how many of list each key has, most first, as
// "key n, key n".
func countsBy(list [][2]string, key func([2]string) string) string {
	counts := map[string]int{}
	for _, e := range list {
		counts[key(e)]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if counts[keys[i]] != counts[keys[j]] {
			return counts[keys[i]] > counts[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, counts[k])
	}
	return strings.Join(parts, ", ")
}

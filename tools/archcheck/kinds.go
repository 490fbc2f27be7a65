package main

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
)

// kindNames are the limiter types of the root package: a type switch case
// or a type assertion on one of them tells the kinds apart by hand.
var kindNames = map[string]bool{
	"TokenBucket": true, "GCRA": true, "FixedWindow": true, "SlidingLog": true,
	"SlidingCounter": true, "CalendarWindow": true, "Concurrency": true,
	"RedisTokenBucket": true, "RedisGCRA": true, "RedisFixedWindow": true, "RedisSlidingLog": true,
	"RedisSlidingCounter": true, "RedisCalendarWindow": true, "RedisConcurrency": true,
}

// defaultLetters are the batch script's kind letters, when no Kind
// constants of internal/redisbatch tell them.
const defaultLetters = "tgwTGclks"

// kindTest is one place that tells the kinds apart by hand.
type kindTest struct {
	file string // slash-separated, from the repository's root
	line int
	fn   string // its function: "Type.Method", "Func", in Lua a function's name, "(top-level)" or "kinds"
	form string // see the form* constants
	what string // the type, constant or letter it tests
}

// The forms of a kindTest.
const (
	formCase      = "type switch case"
	formAssert    = "type assertion"
	formPointer   = "nil test of a kind's pointer"
	formNil       = "nil test of a kind"
	formConst     = "Kind constant"
	formLuaLetter = "Lua kind letter"
	formLuaTable  = "Lua kinds table entry"
)

// plurals are the forms' plurals.
var plurals = map[string]string{
	formCase:      "type switch cases",
	formAssert:    "type assertions",
	formPointer:   "nil tests of a kind's pointer",
	formNil:       "nil tests of a kind",
	formConst:     "Kind constants",
	formLuaLetter: "Lua kind letters",
	formLuaTable:  "Lua kinds table entries",
}

// site is where kind tests are: a function of a file.
func (k kindTest) site() string { return k.file + " " + k.fn }

// kindScan finds the kind tests of Go packages and Lua scripts.
type kindScan struct {
	root    string // the repository's root directory
	module  string // its module path: the root package's, whose types kindNames name
	letters string // the batch script's kind letters
	// pointerSets are the struct types with two or more fields that point
	// to a kind's type (a struct that holds one part of several kinds, a
	// field per kind): a nil test of one of their pointer fields is a kind
	// test.
	pointerSets map[*types.Struct]bool
	// engines are the underlying types of the limiter types: a pointer to
	// a type of one of them (TokenBucket's engine, say) points to a kind.
	engines []types.Type
	tests   []kindTest
}

// newKindScan returns a scan of the packages pkgs of the module module at
// root.
func newKindScan(root, module string, pkgs []*packages.Package) *kindScan {
	s := &kindScan{root: root, module: module, pointerSets: map[*types.Struct]bool{}}
	s.letters = kindLetters(module, pkgs)
	for _, p := range pkgs {
		if p.PkgPath != module || p.Types == nil {
			continue
		}
		for name := range kindNames {
			if obj, ok := p.Types.Scope().Lookup(name).(*types.TypeName); ok {
				s.engines = append(s.engines, obj.Type().Underlying())
			}
		}
	}
	for _, p := range pkgs {
		s.findPointerSets(p)
	}
	return s
}

// kindLetters returns the values of the constants of type Kind of the
// module's internal/redisbatch package, or defaultLetters without them.
func kindLetters(module string, pkgs []*packages.Package) string {
	var letters []string
	for _, p := range pkgs {
		if p.PkgPath != module+"/internal/redisbatch" || p.Types == nil {
			continue
		}
		scope := p.Types.Scope()
		for _, name := range scope.Names() {
			c, ok := scope.Lookup(name).(*types.Const)
			if ok && isKindConstType(module, c.Type()) && c.Val().Kind() == constant.String {
				letters = append(letters, constant.StringVal(c.Val()))
			}
		}
	}
	if len(letters) == 0 {
		return defaultLetters
	}
	sort.Strings(letters)
	return strings.Join(letters, "")
}

// isKind reports whether t is one of the module's limiter types, or a
// pointer to one.
func (s *kindScan) isKind(t types.Type) bool {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := t.(*types.Named)
	if !ok || n.Obj().Pkg() == nil {
		return false
	}
	return n.Obj().Pkg().Path() == s.module && kindNames[n.Obj().Name()]
}

// isKindConstType reports whether t is the type Kind of the module's
// internal/redisbatch package.
func isKindConstType(module string, t types.Type) bool {
	n, ok := t.(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Name() == "Kind" && n.Obj().Pkg().Path() == module+"/internal/redisbatch"
}

// findPointerSets records p's struct types that point to two or more
// kinds: to a limiter type, or to a type whose underlying type is a
// limiter type's (the engine of TokenBucket and GCRA, say).
func (s *kindScan) findPointerSets(p *packages.Package) {
	if p.Types == nil {
		return
	}
	scope := p.Types.Scope()
	for _, name := range scope.Names() {
		tn, ok := scope.Lookup(name).(*types.TypeName)
		if !ok {
			continue
		}
		st, ok := tn.Type().Underlying().(*types.Struct)
		if !ok {
			continue
		}
		count := 0
		for i := range st.NumFields() {
			ptr, ok := st.Field(i).Type().(*types.Pointer)
			if !ok {
				continue
			}
			if s.isKind(ptr) {
				count++
				continue
			}
			for _, k := range s.engines {
				if types.Identical(ptr.Elem().Underlying(), k) {
					count++
					break
				}
			}
		}
		if count >= 2 {
			s.pointerSets[st] = true
		}
	}
}

// scanGo records the kind tests of p's files.
func (s *kindScan) scanGo(p *packages.Package) {
	for _, f := range p.Syntax {
		file := s.rel(p.Fset.Position(f.Pos()).Filename)
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			fn := fd.Name.Name
			if fd.Recv != nil {
				if id := receiverName(fd.Recv.List[0].Type); id != nil {
					fn = id.Name + "." + fn
				}
			}
			params := map[types.Object]bool{}
			for _, list := range []*ast.FieldList{fd.Recv, fd.Type.Params} {
				if list == nil {
					continue
				}
				for _, f := range list.List {
					for _, name := range f.Names {
						params[p.TypesInfo.Defs[name]] = true
					}
				}
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				s.inspect(p, file, fn, n, params)
				return true
			})
		}
	}
}

// inspect records the kind test n is, if any, in function fn of file,
// whose receiver and parameters are params.
func (s *kindScan) inspect(p *packages.Package, file, fn string, n ast.Node, params map[types.Object]bool) {
	add := func(pos token.Pos, form, what string) {
		s.tests = append(s.tests, kindTest{file: file, line: p.Fset.Position(pos).Line, fn: fn, form: form, what: what})
	}
	info := p.TypesInfo
	switch x := n.(type) {
	case *ast.TypeSwitchStmt:
		for _, c := range x.Body.List {
			// The switch's own variable, of the case's type: a nil test of
			// it is part of this switch.
			if v := info.Implicits[c]; v != nil {
				params[v] = true
			}
			for _, e := range c.(*ast.CaseClause).List {
				if t := info.TypeOf(e); t != nil && s.isKind(t) {
					add(e.Pos(), formCase, typeName(t))
				}
			}
		}
	case *ast.TypeAssertExpr:
		if x.Type != nil {
			if t := info.TypeOf(x.Type); t != nil && s.isKind(t) {
				add(x.Pos(), formAssert, typeName(t))
			}
		}
	case *ast.SwitchStmt:
		if x.Tag == nil {
			return
		}
		for _, c := range x.Body.List {
			for _, e := range c.(*ast.CaseClause).List {
				if name, ok := s.kindConst(info, e); ok {
					add(e.Pos(), formConst, name)
				}
			}
		}
	case *ast.BinaryExpr:
		if x.Op != token.EQL && x.Op != token.NEQ {
			return
		}
		for _, side := range []ast.Expr{x.X, x.Y} {
			if name, ok := s.kindConst(info, side); ok {
				add(side.Pos(), formConst, name)
			}
		}
		if field, ok := s.pointerTest(info, x); ok {
			add(x.Pos(), formPointer, field)
		} else if name, ok := s.kindNilTest(info, x, params); ok {
			add(x.Pos(), formNil, name)
		}
	}
}

// kindConst reports whether e is a constant of type Kind of
// internal/redisbatch, and returns its name.
func (s *kindScan) kindConst(info *types.Info, e ast.Expr) (string, bool) {
	var id *ast.Ident
	switch x := ast.Unparen(e).(type) {
	case *ast.Ident:
		id = x
	case *ast.SelectorExpr:
		id = x.Sel
	default:
		return "", false
	}
	c, ok := info.Uses[id].(*types.Const)
	if !ok || !isKindConstType(s.module, c.Type()) {
		return "", false
	}
	return c.Name(), true
}

// pointerTest reports whether x compares a pointer field of a pointer-set
// struct with nil, and returns the field's name.
func (s *kindScan) pointerTest(info *types.Info, x *ast.BinaryExpr) (string, bool) {
	sel, other := x.X, x.Y
	if isNil(info, sel) {
		sel, other = other, sel
	}
	if !isNil(info, other) {
		return "", false
	}
	se, ok := ast.Unparen(sel).(*ast.SelectorExpr)
	if !ok {
		return "", false
	}
	selection := info.Selections[se]
	if selection == nil || selection.Kind() != types.FieldVal {
		return "", false
	}
	recv := selection.Recv()
	if p, ok := recv.(*types.Pointer); ok {
		recv = p.Elem()
	}
	st, ok := recv.Underlying().(*types.Struct)
	if !ok || !s.pointerSets[st] {
		return "", false
	}
	if _, ok := selection.Obj().Type().(*types.Pointer); !ok {
		return "", false
	}
	return se.Sel.Name, true
}

// kindNilTest reports whether x compares with nil a value of a limiter
// type that is not one of params (the receiver and parameters of the
// function x is in, whose nil tests guard against a nil pointer, and the
// variables of its type switches, which are part of those): a part found
// to be of a kind (cal := calendarOf(i); cal != nil), and returns the
// type.
func (s *kindScan) kindNilTest(info *types.Info, x *ast.BinaryExpr, params map[types.Object]bool) (string, bool) {
	val, other := x.X, x.Y
	if isNil(info, val) {
		val, other = other, val
	}
	if !isNil(info, other) {
		return "", false
	}
	t := info.TypeOf(val)
	if t == nil || !s.isKind(t) {
		return "", false
	}
	if id, ok := ast.Unparen(val).(*ast.Ident); ok && params[info.Uses[id]] {
		return "", false
	}
	return typeName(t), true
}

// isNil reports whether e is the predeclared nil.
func isNil(info *types.Info, e ast.Expr) bool {
	id, ok := ast.Unparen(e).(*ast.Ident)
	if !ok {
		return false
	}
	_, isNil := info.Uses[id].(*types.Nil)
	return isNil
}

// typeName returns t as a case names it: "*TokenBucket".
func typeName(t types.Type) string {
	return types.TypeString(t, func(*types.Package) string { return "" })
}

// luaFunc, luaLetter and luaKindsEntry find a Lua function's start, a
// comparison of a kind with a letter ("kind == 't'", "c.kind ~= 'c'"), and
// an entry of the kinds table set by its letter (kinds['t'] or kinds.t).
var (
	luaFunc       = regexp.MustCompile(`^(?:local\s+)?function\s+([A-Za-z_][A-Za-z0-9_.:]*)`)
	luaLetter     = regexp.MustCompile(`kind\s*(?:==|~=)\s*'([A-Za-z])'`)
	luaKindsEntry = regexp.MustCompile(`kinds\s*(?:\[\s*'([A-Za-z])'\s*\]|\.([A-Za-z])\b)`)
	luaTableEntry = regexp.MustCompile(`^\s+([A-Za-z])\s*=\s*\{`)
)

// scanLua records the kind tests of the Lua file path: comparisons with a
// kind letter, and the entries of the kinds table under a letter. A
// test's function is the top-level function it is in (one that starts at
// the line's start and ends at an "end" there), "(top-level)" outside
// them, or "kinds" in the table "local kinds = { ... }".
func (s *kindScan) scanLua(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	file := s.rel(path)
	fn, inTable := "(top-level)", false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		code, _, _ := strings.Cut(text, "--")
		switch {
		case strings.HasPrefix(text, "local kinds = {"):
			inTable = true
			continue
		case inTable && strings.HasPrefix(text, "}"):
			inTable = false
			continue
		case luaFunc.MatchString(text):
			fn = luaFunc.FindStringSubmatch(text)[1]
		case strings.HasPrefix(text, "end"):
			fn = "(top-level)"
		}
		add := func(form, letter string) {
			if strings.Contains(s.letters, letter) {
				where := fn
				if inTable {
					where = "kinds"
				}
				s.tests = append(s.tests, kindTest{file: file, line: line, fn: where, form: form, what: "'" + letter + "'"})
			}
		}
		if inTable {
			if m := luaTableEntry.FindStringSubmatch(code); m != nil {
				add(formLuaTable, m[1])
			}
			continue
		}
		for _, m := range luaLetter.FindAllStringSubmatch(code, -1) {
			add(formLuaLetter, m[1])
		}
		for _, m := range luaKindsEntry.FindAllStringSubmatch(code, -1) {
			add(formLuaTable, m[1]+m[2])
		}
	}
	return sc.Err()
}

// rel returns path from the repository's root, slash-separated.
func (s *kindScan) rel(path string) string {
	r, err := filepath.Rel(s.root, path)
	if err != nil {
		return path
	}
	return filepath.ToSlash(r)
}

// sites returns the scan's tests grouped by site, in order of file, then
// line.
func (s *kindScan) sites() [][]kindTest {
	sort.SliceStable(s.tests, func(i, j int) bool {
		if s.tests[i].file != s.tests[j].file {
			return s.tests[i].file < s.tests[j].file
		}
		return s.tests[i].line < s.tests[j].line
	})
	index := map[string]int{}
	var sites [][]kindTest
	for _, t := range s.tests {
		i, ok := index[t.site()]
		if !ok {
			i = len(sites)
			index[t.site()] = i
			sites = append(sites, nil)
		}
		sites[i] = append(sites[i], t)
	}
	return sites
}

// describe returns the tests of one site as a line of the report: the
// first line, the number of tests of each form, and what they test.
func describe(site []kindTest) string {
	forms := map[string][]string{}
	var order []string
	for _, t := range site {
		if _, ok := forms[t.form]; !ok {
			order = append(order, t.form)
		}
		forms[t.form] = append(forms[t.form], t.what)
	}
	parts := make([]string, 0, len(order))
	for _, f := range order {
		name := f
		if len(forms[f]) > 1 {
			name = plurals[f]
		}
		parts = append(parts, fmt.Sprintf("%d %s (%s)", len(forms[f]), name, strings.Join(unique(forms[f]), " ")))
	}
	return fmt.Sprintf("%s:%d %s: %s", site[0].file, site[0].line, site[0].fn, strings.Join(parts, ", "))
}

// unique returns list without repeats, in order.
func unique(list []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range list {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// readAllow returns the sites an allowlist names: a line "file function"
// per site ('#' starts a comment; blank lines are skipped).
func readAllow(text string) map[string]bool {
	allow := map[string]bool{}
	for line := range strings.Lines(text) {
		line, _, _ = strings.Cut(line, "#")
		if f := strings.Fields(line); len(f) == 2 {
			allow[f[0]+" "+f[1]] = true
		}
	}
	return allow
}

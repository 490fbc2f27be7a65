package main

import (
	"go/ast"
	"go/types"
	"path/filepath"
	"sort"

	"golang.org/x/tools/go/packages"
)

// fileGraph is the file graph of one package: its non-test files, and an
// arrow from file A to file B when A uses a package-level object (func,
// type, const, var), a method or a field declared in B.
type fileGraph struct {
	files  []string           // base names, sorted
	arrows map[[2]string]int  // (from, to): the number of uses; each pair is one arrow
	added  map[string][]added // file: the methods it declares on types declared in another file
}

// added is a method a file declares on a type another file declares.
type added struct {
	typ, method string
}

// graphOf returns the file graph of p, which must be loaded with its
// syntax and types.
func graphOf(p *packages.Package) *fileGraph {
	g := &fileGraph{arrows: map[[2]string]int{}, added: map[string][]added{}}
	fileOf := func(obj types.Object) string {
		if obj == nil || !obj.Pos().IsValid() || obj.Pkg() != p.Types {
			return ""
		}
		return filepath.Base(p.Fset.Position(obj.Pos()).Filename)
	}
	for _, f := range p.Syntax {
		name := filepath.Base(p.Fset.Position(f.Pos()).Filename)
		g.files = append(g.files, name)
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil {
				continue
			}
			id := receiverName(fd.Recv.List[0].Type)
			if id == nil {
				continue
			}
			if tf := fileOf(p.TypesInfo.Uses[id]); tf != "" && tf != name {
				g.added[name] = append(g.added[name], added{typ: id.Name, method: fd.Name.Name})
			}
		}
	}
	sort.Strings(g.files)
	for id, obj := range p.TypesInfo.Uses {
		from := filepath.Base(p.Fset.Position(id.Pos()).Filename)
		to := fileOf(obj)
		if to == "" || to == from || !packageLevel(p.Types, obj) {
			continue
		}
		g.arrows[[2]string{from, to}]++
	}
	return g
}

// receiverName returns the name of a method's receiver type, through a
// pointer and type parameters; nil for anything else.
func receiverName(t ast.Expr) *ast.Ident {
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	id, _ := t.(*ast.Ident)
	return id
}

// packageLevel reports whether obj, an object of pkg, is one an arrow
// counts: a func or method, a field, or a type, const or var declared at
// package level (not a local, a parameter or a local type).
func packageLevel(pkg *types.Package, obj types.Object) bool {
	switch o := obj.(type) {
	case *types.Var:
		return o.IsField() || o.Parent() == pkg.Scope()
	case *types.Func:
		return true
	case *types.TypeName, *types.Const:
		return o.Parent() == nil || o.Parent() == pkg.Scope()
	}
	return false
}

// order returns g's files in the order of the greedy heuristic of Eades,
// Lin and Smyth for a small feedback arc set, users above what they use
// (see the package doc), and each file's place in it.
func (g *fileGraph) order() ([]string, map[string]int) {
	n := len(g.files)
	idx := make(map[string]int, n)
	for i, f := range g.files {
		idx[f] = i
	}
	out := make([][]int, n)
	in := make([][]int, n)
	for e := range g.arrows {
		a, b := idx[e[0]], idx[e[1]]
		out[a] = append(out[a], b)
		in[b] = append(in[b], a)
	}
	alive := make([]bool, n)
	for i := range alive {
		alive[i] = true
	}
	deg := func(i int, adj [][]int) int {
		c := 0
		for _, j := range adj[i] {
			if alive[j] {
				c++
			}
		}
		return c
	}
	var top, bottom []int // top in order; bottom from the bottom up
	for left := n; left > 0; {
		for changed := true; changed; {
			changed = false
			for i := range n {
				if alive[i] && deg(i, out) == 0 { // a sink: uses no file left
					bottom = append(bottom, i)
					alive[i] = false
					left--
					changed = true
				}
			}
			for i := range n {
				if alive[i] && deg(i, in) == 0 { // a source: no file left uses it
					top = append(top, i)
					alive[i] = false
					left--
					changed = true
				}
			}
		}
		if left == 0 {
			break
		}
		best, bv := -1, 0
		for i := range n {
			if v := deg(i, out) - deg(i, in); alive[i] && (best < 0 || v > bv) {
				best, bv = i, v
			}
		}
		top = append(top, best)
		alive[best] = false
		left--
	}
	files := make([]string, 0, n)
	for _, i := range top {
		files = append(files, g.files[i])
	}
	for k := len(bottom) - 1; k >= 0; k-- {
		files = append(files, g.files[bottom[k]])
	}
	pos := make(map[string]int, n)
	for k, f := range files {
		pos[f] = k
	}
	return files, pos
}

// back returns g's back arrows, sorted: those from a file to one above it
// in order's order.
func (g *fileGraph) back() [][2]string {
	_, pos := g.order()
	var back [][2]string
	for e := range g.arrows {
		if pos[e[1]] < pos[e[0]] {
			back = append(back, e)
		}
	}
	sort.Slice(back, func(i, j int) bool {
		if back[i][0] != back[j][0] {
			return back[i][0] < back[j][0]
		}
		return back[i][1] < back[j][1]
	})
	return back
}

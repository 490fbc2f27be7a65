package main

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// apiCount is the exported surface of one package, as godoc shows it.
type apiCount struct {
	dir   string   // from the repository's root, slash-separated
	names []string // exported top-level names: "type X", "func New", "const C", "var V"
	// methods are the exported methods of its exported types, "T.M", those
	// promoted from unexported embedded types included, and the exported
	// methods its exported interfaces declare, "I.M (interface)".
	methods    []string
	interfaces int // how many of methods an interface declares
}

// countAPI returns the exported surface of the package of the non-test Go
// files of dir (at root), counted as godoc lists it: every exported type,
// func (constructors included), const and var is a name; every method of
// an exported type is a method, and so is every method an exported
// interface declares.
func countAPI(root, dir string) (apiCount, error) {
	fset := token.NewFileSet()
	path := filepath.Join(root, dir)
	entries, err := os.ReadDir(path)
	if err != nil {
		return apiCount{}, err
	}
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(path, name), nil, parser.ParseComments)
		if err != nil {
			return apiCount{}, err
		}
		files = append(files, f)
	}
	c := apiCount{dir: filepath.ToSlash(dir)}
	if len(files) == 0 {
		return c, nil
	}
	p, err := doc.NewFromFiles(fset, files, dir)
	if err != nil {
		return apiCount{}, err
	}
	values := func(kind string, vs []*doc.Value) {
		for _, v := range vs {
			for _, n := range v.Names {
				if ast.IsExported(n) {
					c.names = append(c.names, kind+" "+n)
				}
			}
		}
	}
	values("const", p.Consts)
	values("var", p.Vars)
	for _, f := range p.Funcs {
		c.names = append(c.names, "func "+f.Name)
	}
	for _, t := range p.Types {
		c.names = append(c.names, "type "+t.Name)
		values("const", t.Consts)
		values("var", t.Vars)
		for _, f := range t.Funcs {
			c.names = append(c.names, "func "+f.Name)
		}
		for _, m := range t.Methods {
			c.methods = append(c.methods, t.Name+"."+m.Name)
		}
		for _, spec := range t.Decl.Specs {
			ts, ok := spec.(*ast.TypeSpec)
			if !ok || ts.Name.Name != t.Name {
				continue
			}
			if it, ok := ts.Type.(*ast.InterfaceType); ok {
				for _, m := range it.Methods.List {
					for _, n := range m.Names {
						if n.IsExported() {
							c.methods = append(c.methods, t.Name+"."+n.Name+" (interface)")
							c.interfaces++
						}
					}
				}
			}
		}
	}
	sort.Strings(c.names)
	sort.Strings(c.methods)
	return c, nil
}

// apiDirs returns the directories under root that hold a package with an
// API: every directory with non-test Go files of a package other than
// main, but those under testdata, examples, bench and tools, and hidden
// ones; from root, slash-separated, root itself as ".".
func apiDirs(root string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel != "." {
			switch base := d.Name(); {
			case strings.HasPrefix(base, "."), strings.HasPrefix(base, "_"), base == "testdata":
				return filepath.SkipDir
			case rel == "examples", rel == "bench", rel == "tools":
				return filepath.SkipDir
			}
		}
		if isLibrary(path) {
			dirs = append(dirs, rel)
		}
		return nil
	})
	return dirs, err
}

// isLibrary reports whether dir holds non-test Go files of a package other
// than main.
func isLibrary(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.PackageClauseOnly)
		if err == nil {
			return f.Name.Name != "main"
		}
	}
	return false
}

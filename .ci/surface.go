//go:build ignore

// surface prints, per package directory given, the exported API the package
// offers (types, funcs, methods of exported types, methods of exported
// interfaces, consts, vars) and its comment density (words on // lines
// divided by all lines of its non-test Go files). Run from the module root:
//
//	go run .ci/surface.go message ring heartbeat bus fence service
//
// A trailing "total" line sums the directories given.
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
)

type counts struct {
	types, funcs, methods, ifaceMethods, consts, vars int
	lines, commentWords                               int
}

func (c counts) exports() int {
	return c.types + c.funcs + c.methods + c.ifaceMethods + c.consts + c.vars
}

func (c *counts) add(o counts) {
	c.types += o.types
	c.funcs += o.funcs
	c.methods += o.methods
	c.ifaceMethods += o.ifaceMethods
	c.consts += o.consts
	c.vars += o.vars
	c.lines += o.lines
	c.commentWords += o.commentWords
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: go run .ci/surface.go DIR...")
		os.Exit(2)
	}
	fmt.Printf("%-22s %7s %5s %5s %7s %6s %6s %5s %6s %8s\n",
		"package", "exports", "types", "funcs", "methods", "ifaceM", "consts", "vars", "lines", "words/ln")
	var total counts
	for _, dir := range os.Args[1:] {
		c, err := count(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		print(dir, c)
		total.add(c)
	}
	if len(os.Args) > 2 {
		print("total", total)
	}
}

func print(name string, c counts) {
	fmt.Printf("%-22s %7d %5d %5d %7d %6d %6d %5d %6d %8.2f\n", name, c.exports(),
		c.types, c.funcs, c.methods, c.ifaceMethods, c.consts, c.vars, c.lines,
		float64(c.commentWords)/float64(max(c.lines, 1)))
}

// count measures the non-test Go files directly in dir.
func count(dir string) (counts, error) {
	var c counts
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return c, err
	}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return c, err
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return c, err
		}
		if strings.Contains(string(src), "//go:build ignore") {
			continue
		}
		for _, line := range strings.Split(strings.TrimSuffix(string(src), "\n"), "\n") {
			c.lines++
			if i := strings.Index(line, "//"); i >= 0 && strings.TrimSpace(line[:i]) == "" {
				c.commentWords += len(strings.Fields(line[i+2:]))
			}
		}
		countDecls(f, &c)
	}
	return c, nil
}

func countDecls(f *ast.File, c *counts) {
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				c.funcs++
				continue
			}
			if recvExported(d.Recv.List[0].Type) {
				c.methods++
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					c.types++
					if it, ok := s.Type.(*ast.InterfaceType); ok {
						for _, m := range it.Methods.List {
							for _, n := range m.Names {
								if n.IsExported() {
									c.ifaceMethods++
								}
							}
						}
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if !n.IsExported() {
							continue
						}
						if d.Tok == token.CONST {
							c.consts++
						} else {
							c.vars++
						}
					}
				}
			}
		}
	}
}

// recvExported reports whether a method receiver names an exported type.
func recvExported(t ast.Expr) bool {
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return false
		}
	}
}

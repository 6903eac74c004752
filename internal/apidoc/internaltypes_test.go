package apidoc

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// internalLeft lists the exported declarations of public packages that
// still name a type of an internal package, each with why an embedder never
// has to write that type: the field is optional (nil means the default) or
// the value is only ever received and used through its methods.
var internalLeft = map[string]string{
	"server.Server.Metrics":           "set by server.New; served on /metrics, never built by an embedder",
	"server.Server.Purger":            "returned to cmd/gateway's dedup purge; used through its methods",
	"as2.Config.Trust":                "optional: nil means a checker with defaults (server wires one)",
	"endpoint.Config.Trust":           "optional: nil means a checker with defaults (server wires one)",
	"endpoint.Config.Peppol":          "optional: set by server from the peppol configuration",
	"partners.Directory.AS2Trust":     "returned policy, used through its methods",
	"partners.Directory.AS4Trust":     "returned policy, used through its methods",
	"partners.Directory.SignerPolicy": "returned policy, for internal/certs' check of listed certificates (certs.CAPolicies); never built by an embedder",
}

// TestPublicAPINamesNoInternalType: an exported function, method, struct
// field, interface method or typed variable of a package outside internal/
// does not name a type of an internal package (which other modules cannot
// import, so they could not write it), unless internalLeft says why no
// embedder needs to. A type an embedder must write is given a name in the
// public package (an alias such as as2.KeyPair = cms.KeyPair).
func TestPublicAPINamesNoInternalType(t *testing.T) {
	root := moduleRoot(t)
	seen := map[string]bool{}
	packages := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		name := d.Name()
		if rel != "." && (name == "internal" || name == "testdata" || name == "vendor" ||
			strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		files, _ := filepath.Glob(filepath.Join(path, "*.go"))
		checked := false
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			if file.Name.Name == "main" {
				break
			}
			checked = true
			for _, where := range internalNames(file) {
				if _, ok := internalLeft[where.decl]; ok {
					seen[where.decl] = true
					continue
				}
				t.Errorf("%s: %s names %s of an internal package: give it a name in package %s (an alias) or say in internalLeft why no embedder writes it",
					filepath.ToSlash(filepath.Join(rel, filepath.Base(f))), where.decl, where.typ, file.Name.Name)
			}
		}
		if checked {
			packages++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if packages < 15 {
		t.Fatalf("only %d public library packages found under %s: the walk is broken", packages, root)
	}
	for decl := range internalLeft {
		if !seen[decl] {
			t.Errorf("internalLeft lists %s, which no longer names an internal type: remove it", decl)
		}
	}
}

type internalUse struct{ decl, typ string }

// internalNames returns the exported declarations of file whose types name
// a package imported from an internal/ path.
func internalNames(file *ast.File) []internalUse {
	internal := map[string]string{} // local name -> import path
	for _, imp := range file.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if !strings.HasPrefix(path, "internal/") && !strings.Contains(path, "/internal/") {
			continue
		}
		local := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			local = imp.Name.Name
		}
		internal[local] = path
	}
	if len(internal) == 0 {
		return nil
	}
	pkg := file.Name.Name
	var out []internalUse
	check := func(decl string, expr ast.Expr) {
		ast.Inspect(expr, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok {
					if path, ok := internal[id.Name]; ok {
						out = append(out, internalUse{decl, fmt.Sprintf("%s.%s (%s)", id.Name, sel.Sel.Name, path)})
					}
				}
				return false
			}
			return true
		})
	}
	fields := func(prefix string, fl *ast.FieldList) {
		if fl == nil {
			return
		}
		for _, f := range fl.List {
			if len(f.Names) == 0 { // embedded
				check(prefix, f.Type)
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					check(prefix+"."+n.Name, f.Type)
				}
			}
		}
	}
	for _, d := range file.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			name := pkg + "." + d.Name.Name
			if d.Recv != nil && len(d.Recv.List) == 1 {
				recv := d.Recv.List[0].Type
				if s, ok := recv.(*ast.StarExpr); ok {
					recv = s.X
				}
				if ix, ok := recv.(*ast.IndexExpr); ok {
					recv = ix.X
				}
				id, ok := recv.(*ast.Ident)
				if !ok || !id.IsExported() {
					continue
				}
				name = pkg + "." + id.Name + "." + d.Name.Name
			}
			check(name, d.Type)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() || s.Assign.IsValid() {
						continue // unexported, or an alias: the public name for the type
					}
					name := pkg + "." + s.Name.Name
					switch ty := s.Type.(type) {
					case *ast.StructType:
						fields(name, ty.Fields)
					case *ast.InterfaceType:
						fields(name, ty.Methods)
					default:
						check(name, ty)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() && s.Type != nil {
							check(pkg+"."+n.Name, s.Type)
						}
					}
				}
			}
		}
	}
	return out
}

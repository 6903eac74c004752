package apidoc

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// moduleRoot is the directory holding go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	return root
}

// TestEveryPublicPackageHasAPackageComment: every package outside internal/
// (and testdata) starts its documentation with "Package <name> ..." (or
// "Command <name> ..." for a program), so that `go doc` of it reads as API.
func TestEveryPublicPackageHasAPackageComment(t *testing.T) {
	root := moduleRoot(t)
	checked := 0
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
		entries, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		// The package name and the comments of its non-test files (a
		// package comment may sit in any of them; doc.go by convention).
		pkgName, docs := "", []string(nil)
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(path, e.Name()), nil, parser.ParseComments|parser.PackageClauseOnly)
			if err != nil {
				return err
			}
			pkgName = f.Name.Name
			if f.Doc != nil {
				docs = append(docs, f.Doc.Text())
			}
		}
		if pkgName == "" {
			return nil // no Go package here
		}
		checked++
		want := "Package " + pkgName + " "
		if pkgName == "main" {
			want = "Command " + filepath.Base(path) + " "
		}
		switch {
		case len(docs) == 0:
			t.Errorf("%s: package %s has no package comment (want one starting %q, in doc.go or its main file)", rel, pkgName, want)
		case !slices.ContainsFunc(docs, func(d string) bool { return strings.HasPrefix(d, want) }):
			t.Errorf("%s: no package comment starts %q:\n%s", rel, want, strings.Join(docs, "\n"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 20 {
		t.Fatalf("only %d packages found under %s: the walk is broken", checked, root)
	}
}

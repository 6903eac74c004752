package codecheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
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

// longFunction is a function body over MaxFunctionLines.
type longFunction struct {
	pos   token.Position
	name  string
	lines int
}

func (f longFunction) String() string {
	return fmt.Sprintf("%s:%d: %s has %d lines (at most %d; split it into named steps, or say why it must stay long with %q in its doc comment)",
		f.pos.Filename, f.pos.Line, f.name, f.lines, MaxFunctionLines, LongDirective+" <reason>")
}

// longFunctions lists the functions of one file's source whose bodies
// have more than MaxFunctionLines lines: declared functions and methods
// (unless their doc comment holds LongDirective with a reason) and
// function literals.
func longFunctions(fset *token.FileSet, filename string, src any) ([]longFunction, error) {
	f, err := parser.ParseFile(fset, filename, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	bodyLines := func(b *ast.BlockStmt) int {
		return fset.Position(b.Rbrace).Line - fset.Position(b.Lbrace).Line - 1
	}
	var out []longFunction
	ast.Inspect(f, func(n ast.Node) bool {
		switch fn := n.(type) {
		case *ast.FuncDecl:
			if fn.Body == nil || bodyLines(fn.Body) <= MaxFunctionLines || excused(fn.Doc) {
				return true
			}
			name := fn.Name.Name
			if fn.Recv != nil && len(fn.Recv.List) == 1 {
				name = "(" + types(fn.Recv.List[0].Type) + ")." + name
			}
			out = append(out, longFunction{fset.Position(fn.Pos()), name, bodyLines(fn.Body)})
		case *ast.FuncLit:
			if bodyLines(fn.Body) > MaxFunctionLines {
				out = append(out, longFunction{fset.Position(fn.Pos()), "a function literal", bodyLines(fn.Body)})
			}
		}
		return true
	})
	return out, nil
}

// excused reports whether a doc comment holds LongDirective with a reason.
func excused(doc *ast.CommentGroup) bool {
	if doc == nil {
		return false
	}
	for _, c := range doc.List {
		if reason, ok := strings.CutPrefix(c.Text, LongDirective); ok && strings.TrimSpace(reason) != "" &&
			(reason[0] == ' ' || reason[0] == '\t') {
			return true
		}
	}
	return false
}

// types spells a receiver type.
func types(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return "*" + types(t.X)
	case *ast.Ident:
		return t.Name
	case *ast.IndexExpr:
		return types(t.X)
	case *ast.IndexListExpr:
		return types(t.X)
	}
	return "?"
}

// TestNoFunctionOver200Lines: no function of the module's non-test code
// has a body of more than MaxFunctionLines lines, unless it says why.
func TestNoFunctionOver200Lines(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		files++
		long, err := longFunctions(fset, path, nil)
		if err != nil {
			return err
		}
		for _, f := range long {
			f.pos.Filename, _ = filepath.Rel(root, f.pos.Filename)
			t.Error(f)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("checked only %d files under %s: the walk missed the module", files, root)
	}
}

// TestLongFunctionsAreFound: the check finds a long function, a long
// method and a long function literal, and excuses only a function whose
// doc comment gives a reason.
func TestLongFunctionsAreFound(t *testing.T) {
	body := strings.Repeat("\tx++\n", MaxFunctionLines+1)
	short := strings.Repeat("\tx++\n", MaxFunctionLines)
	src := "package p\n\nvar x int\n\ntype T struct{}\n\n" +
		"func long() {\n" + body + "}\n\n" +
		"func (*T) longMethod() {\n" + body + "}\n\n" +
		"func atTheLimit() {\n" + short + "}\n\n" +
		"// excused is long.\n//\n" + LongDirective + " a generated table\nfunc excused() {\n" + body + "}\n\n" +
		"// noReason is long.\n" + LongDirective + "\nfunc noReason() {\n" + body + "}\n\n" +
		"var literal = func() {\n" + body + "}\n"
	long, err := longFunctions(token.NewFileSet(), "p.go", src)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range long {
		got = append(got, f.name)
		if f.lines != MaxFunctionLines+1 {
			t.Errorf("%s: %d lines, want %d", f.name, f.lines, MaxFunctionLines+1)
		}
	}
	want := []string{"long", "(*T).longMethod", "noReason", "a function literal"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("long functions found: %q, want %q", got, want)
	}
}

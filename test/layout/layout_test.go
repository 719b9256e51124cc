// Package layout checks the house rules of the repository's Go code that no compiler keeps
// (issue 39): pkg/ stands below cmd/, hack/ and test/; a package nested in another's folder
// belongs to it; no function under pkg/ is over 80 lines and no file over 500.
package layout

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const module = "github.com/hami-go/hami-go"

// Limits for non-test Go files under pkg/ (issue 39: "no pkg function over 80 lines", the
// near-500 files cut at their seams).
const (
	maxFuncLines = 80
	maxFileLines = 500
)

// root is the repository root, two floors above this package.
func root(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("runtime.Caller failed")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// pkgDir is one package directory under pkg/ with its non-test imports of this module.
type pkgDir struct {
	rel     string // pkg/extender
	imports []string
	files   []string // absolute paths of its non-test .go files
}

// packages lists every package directory under pkg/ (build tags ignored: every file counts).
func packages(t *testing.T, repo string) []pkgDir {
	t.Helper()
	ctx := build.Default
	ctx.UseAllFiles = false
	var out []pkgDir
	err := filepath.WalkDir(filepath.Join(repo, "pkg"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		p, err := ctx.ImportDir(path, build.IgnoreVendor)
		if _, none := err.(*build.NoGoError); none {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repo, path)
		pd := pkgDir{rel: filepath.ToSlash(rel)}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") {
				pd.imports = append(pd.imports, strings.TrimPrefix(imp, module+"/"))
			}
		}
		for _, f := range append(p.GoFiles, p.CgoFiles...) {
			pd.files = append(pd.files, filepath.Join(path, f))
		}
		out = append(out, pd)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 10 {
		t.Fatalf("found %d packages under pkg/, want the whole tree", len(out))
	}
	return out
}

// TestImportsStayOnTheirFloor: pkg/ imports nothing from cmd/, hack/ or test/, and a package
// nested in another package's folder (pkg/a/b) is imported, outside tests, only from pkg/a and
// below (issue 39 item 2: pkg/nodeagent imported pkg/dra/draapi, an arrow running back up).
func TestImportsStayOnTheirFloor(t *testing.T) {
	for _, p := range packages(t, root(t)) {
		for _, imp := range p.imports {
			if !strings.HasPrefix(imp, "pkg/") {
				t.Errorf("%s imports %s: pkg/ stands below cmd/, hack/ and test/", p.rel, imp)
				continue
			}
			parts := strings.Split(imp, "/")
			if len(parts) <= 2 {
				continue
			}
			owner := strings.Join(parts[:len(parts)-1], "/")
			if p.rel != owner && !strings.HasPrefix(p.rel, owner+"/") {
				t.Errorf("%s imports %s, which lives in %s's folder: move it to pkg/%s or keep the import inside %s",
					p.rel, imp, owner, parts[len(parts)-1], owner)
			}
		}
	}
}

// TestNoLongFunctionsOrFiles: no function of a non-test file under pkg/ is over maxFuncLines
// lines (declaration to closing brace) and no such file over maxFileLines.
func TestNoLongFunctionsOrFiles(t *testing.T) {
	fset := token.NewFileSet()
	funcs := 0
	for _, p := range packages(t, root(t)) {
		for _, path := range p.files {
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			rel := p.rel + "/" + filepath.Base(path)
			if n := strings.Count(string(src), "\n"); n > maxFileLines {
				t.Errorf("%s: %d lines, over %d: cut it at a seam (one concern per file)", rel, n, maxFileLines)
			}
			f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				funcs++
				if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
					t.Errorf("%s: func %s is %d lines, over %d", rel, fd.Name.Name, n, maxFuncLines)
				}
			}
		}
	}
	if funcs < 100 {
		t.Fatalf("checked %d functions, want the whole of pkg/", funcs)
	}
}

package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// root is the repository root, two floors above this package.
const root = "../.."

// generatedDocs are markdown files a tool writes; their citations are the tool's.
var generatedDocs = map[string]string{
	"docs/bench/report.md": "hack/bench/report (make bench)",
}

// docFiles are the documents whose citations are checked, relative to root: every markdown file
// of the repository (README.md, docs/*.md, charts/hami-go/README.md, the READMEs under hack/ and
// test/), except the generated ones.
func docFiles(t *testing.T) []string {
	t.Helper()
	r := scanRepo(t)
	var files []string
	for _, f := range r.docs {
		if _, ok := generatedDocs[f]; !ok {
			files = append(files, f)
		}
	}
	for _, must := range []string{"README.md", "docs/cases.md"} {
		if !slices.Contains(files, must) {
			t.Fatalf("%s not found under %s", must, root)
		}
	}
	return files
}

func exists(rel string) bool {
	_, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
	return err == nil
}

// repo is what the repository holds: each top-level func of a _test.go (the files that declare
// it), each case id a _test.go cites (in a name or a comment), each case id the rest of the code
// cites (Go, shell, the chart's templates and values), and its markdown files.
type repo struct {
	funcs     map[string][]string
	cases     map[string][]string
	codeCases map[string][]string
	docs      []string
}

var (
	funcRE = regexp.MustCompile(`(?m)^func\s+([A-Za-z_][A-Za-z0-9_]*)\s*[\[(]`)
	// A case id: C and two or more digits, alone or right after a test func's prefix (TestC13…).
	caseRE = regexp.MustCompile(`(?:^|[^A-Za-z0-9]|Test|Benchmark|Fuzz|Example)(C[0-9]{2,})`)
	// A Go test, benchmark, fuzz test or example as a doc names it; a trailing "..." or "…" or
	// "*" makes it a prefix (TestDayTwo*).
	testNameRE = regexp.MustCompile(`\b((?:Test|Benchmark|Fuzz|Example)[A-Z0-9_][A-Za-z0-9_]*)(\.\.\.|…|\*)?`)
	// A markdown link's target.
	linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// The definition of a case in docs/cases.md: "- **C07** …".
	caseDefRE = regexp.MustCompile(`(?m)^- \*\*(C[0-9]{2,})\*\*`)
	// A trailing :line or :line-line on a cited path.
	lineSuffixRE = regexp.MustCompile(`:[0-9]+(-[0-9]+)?$`)
)

// skipDir says whether a directory is no part of the repository's own sources: version control,
// build outputs, the tools' source trees (hack/tools/<tool>/src) and clones of other repositories
// (a directory with its own .git).
func skipDir(path string, d fs.DirEntry) bool {
	name := d.Name()
	if path == root {
		return false
	}
	switch name {
	case "_output", "bin", "vendor", "node_modules", "testdata":
		return true
	}
	if rel, err := filepath.Rel(root, path); err == nil {
		if m, _ := filepath.Match("hack/tools/*/src", filepath.ToSlash(rel)); m {
			return true
		}
	}
	if strings.HasPrefix(name, ".") {
		return true
	}
	_, err := os.Stat(filepath.Join(path, ".git"))
	return err == nil
}

// scanRepo reads the repository's test files once for all the tests of this package.
func scanRepo(t *testing.T) *repo {
	t.Helper()
	r, err := scanOnce()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var scanOnce = sync.OnceValues(func() (*repo, error) {
	r := &repo{funcs: map[string][]string{}, cases: map[string][]string{}, codeCases: map[string][]string{}}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipDir(path, d) {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if strings.HasSuffix(d.Name(), ".md") {
			r.docs = append(r.docs, rel)
			return nil
		}
		cases, test := r.codeCases, strings.HasSuffix(d.Name(), "_test.go")
		switch {
		case test:
			cases = r.cases
		case slices.Contains([]string{".go", ".sh", ".yaml", ".tpl"}, filepath.Ext(d.Name())):
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if test {
			for _, m := range funcRE.FindAllSubmatch(b, -1) {
				r.funcs[string(m[1])] = append(r.funcs[string(m[1])], rel)
			}
		}
		if strings.HasPrefix(rel, "test/docs/") {
			return nil // this test's own examples cite no case
		}
		for _, m := range caseRE.FindAllSubmatch(b, -1) {
			id := string(m[1])
			if !slices.Contains(cases[id], rel) {
				cases[id] = append(cases[id], rel)
			}
		}
		return nil
	})
	if err == nil && len(r.funcs) == 0 {
		err = fmt.Errorf("no test funcs found under the repository root %s", root)
	}
	return r, err
})

// line is the 1-based line of offset off in s.
func line(s string, off int) int { return strings.Count(s[:off], "\n") + 1 }

func readDoc(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// externalTests are the tests of other projects the docs cite: name → whose.
var externalTests = map[string]string{
	"TestGatherAllocatedState": "kube-scheduler's DynamicResources plugin (docs/dra.md, the in-flight double count)",
	"TestAllocator":            "k8s.io/dynamic-resource-allocation's structured allocators (hack/dra-repro/capacity-scan)",
}

// Every Go test, benchmark and fuzz test the docs name is a func of some _test.go.
func TestDocsCiteExistingTests(t *testing.T) {
	r := scanRepo(t)
	names := make([]string, 0, len(r.funcs))
	for n := range r.funcs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, doc := range docFiles(t) {
		s := readDoc(t, doc)
		for _, m := range testNameRE.FindAllStringSubmatchIndex(s, -1) {
			name, prefix := s[m[2]:m[3]], m[4] >= 0
			if _, ok := externalTests[name]; ok {
				continue
			}
			// go test -run X / -bench X: a pattern, which names every test it prefixes.
			before := strings.TrimRight(s[max(0, m[0]-8):m[0]], " =")
			prefix = prefix || strings.HasSuffix(before, "-run") || strings.HasSuffix(before, "-bench")
			if prefix {
				i := sort.SearchStrings(names, name)
				if i < len(names) && strings.HasPrefix(names[i], name) {
					continue
				}
			} else if _, ok := r.funcs[name]; ok {
				continue
			}
			t.Errorf("%s:%d cites %s, which is no func in any _test.go", doc, line(s, m[0]), s[m[0]:m[1]])
		}
	}
}

// casesTokenRE finds, in docs/cases.md, the repository paths, the tests and the semicolons that
// end a file's list of tests ("Tests: pkg/a/x_test.go `TestA`, `TestB`; pkg/b `TestC`").
var casesTokenRE = regexp.MustCompile(`(?:pkg|cmd|hack|test|internal)/[A-Za-z0-9_./\-]*[A-Za-z0-9_]|\b(?:Test|Benchmark|Fuzz)[A-Z0-9_][A-Za-z0-9_]*|;`)

// docs/cases.md names each test after its file or package ("file `TestName`"): a test named after
// a path, in the same case and before the next semicolon, is a func of that file or of a
// _test.go under that directory, so a test moved to another file or package shows.
func TestCasesCiteTestsInTheirFiles(t *testing.T) {
	r := scanRepo(t)
	s := readDoc(t, "docs/cases.md")
	// One entry per case (a list item) or paragraph.
	starts := []int{0}
	for _, m := range regexp.MustCompile(`\n(?:- |\n)`).FindAllStringIndex(s, -1) {
		starts = append(starts, m[1])
	}
	starts = append(starts, len(s))
	for i := range len(starts) - 1 {
		entry := s[starts[i]:starts[i+1]]
		cur := ""
		for _, m := range casesTokenRE.FindAllStringIndex(entry, -1) {
			tok := entry[m[0]:m[1]]
			switch {
			case tok == ";":
				cur = ""
			case strings.Contains(tok, "/"):
				cur = strings.TrimSuffix(tok, "/...")
			case cur != "" && r.funcs[tok] != nil:
				in := slices.ContainsFunc(r.funcs[tok], func(f string) bool {
					return f == cur || strings.HasPrefix(path.Dir(f)+"/", cur+"/")
				})
				if !in {
					t.Errorf("docs/cases.md:%d cites %s %s, but %s is in %s", line(s, starts[i]+m[0]), cur, tok, tok, strings.Join(r.funcs[tok], ", "))
				}
			}
		}
	}
}

// pathPrefixes are the repository's top-level directories: a doc's path that starts with one of
// them followed by a slash is a repository path.
func pathPrefixes(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() && !skipDir(filepath.Join(root, e.Name()), e) {
			dirs = append(dirs, regexp.QuoteMeta(e.Name()))
		}
	}
	if len(dirs) == 0 {
		t.Fatal("no top-level directories")
	}
	return dirs
}

// placeholderRE matches the parts of a cited path that stand for a family of files: <mode>,
// *, {a,b}, and a trailing ... (a Go package pattern).
var placeholderRE = regexp.MustCompile(`<[^>/]*>|\*|\{[^}/]*\}|…`)

// checkPath answers "" when the repository has rel (a file or directory; a glob when it has
// placeholders), else what is wrong.
func checkPath(rel string) string {
	rel = strings.TrimSuffix(rel, "/...")
	if placeholderRE.MatchString(rel) {
		pattern := placeholderRE.ReplaceAllString(rel, "*")
		matches, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(pattern)))
		if err != nil || len(matches) == 0 {
			return "no file matches " + pattern
		}
		return ""
	}
	if exists(rel) {
		return ""
	}
	// pkg/device.Phases: a package and one of its names.
	if dir, _, ok := strings.Cut(rel, "."); ok && !strings.Contains(rel[len(dir):], "/") {
		if st, err := os.Stat(filepath.Join(root, filepath.FromSlash(dir))); err == nil && st.IsDir() {
			return ""
		}
	}
	return "no such file or directory"
}

// Every repository path the docs cite (pkg/…, cmd/…, docs/…; with :line, placeholders such as
// <mode>, globs and ./... patterns) exists, and so does every relative link's target. A path of
// another project is written after its repository's name (kubernetes/pkg/…,
// nvidia-container-toolkit/internal/…), which this test leaves alone.
func TestDocsCiteExistingPaths(t *testing.T) {
	pathRE := regexp.MustCompile(`(?:^|[^A-Za-z0-9_./~$@-])(?:\./)?((?:` + strings.Join(pathPrefixes(t), "|") + `)/[A-Za-z0-9_.\-/<>*{}…]*)`)
	for _, doc := range docFiles(t) {
		s := readDoc(t, doc)
		for _, m := range pathRE.FindAllStringSubmatchIndex(s, -1) {
			p := s[m[2]:m[3]]
			p = strings.TrimRight(p, ".:")
			p = lineSuffixRE.ReplaceAllString(p, "")
			if why := checkPath(p); why != "" {
				t.Errorf("%s:%d cites %s: %s", doc, line(s, m[2]), p, why)
			}
		}
		for _, m := range linkRE.FindAllStringSubmatchIndex(s, -1) {
			target := s[m[2]:m[3]]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			rel := filepath.ToSlash(filepath.Join(filepath.Dir(doc), target))
			if strings.HasPrefix(rel, "../") || !exists(rel) {
				t.Errorf("%s:%d links to %s, which is not in the repository", doc, line(s, m[2]), target)
			}
		}
	}
}

var (
	// The sentence of docs/cases.md that lists the ids never assigned.
	unassignedRE = regexp.MustCompile(`Ids not listed\s+\(([^)]*)\)\s+were never assigned`)
	// C05, or a range C15–C17.
	idRangeRE = regexp.MustCompile(`C([0-9]{2,})(?:\s*[–-]\s*C([0-9]{2,}))?`)
)

// The README's component table ("## Components") names every package under pkg/, so a new
// package is not left out of it.
func TestReadmeListsEveryPackage(t *testing.T) {
	s := readDoc(t, "README.md")
	_, table, ok := strings.Cut(s, "\n## Components\n")
	if !ok {
		t.Fatal("README.md has no \"## Components\" section")
	}
	table, _, _ = strings.Cut(table, "\n#")
	entries, err := os.ReadDir(filepath.Join(root, "pkg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && !strings.Contains(table, "`pkg/"+e.Name()+"`") {
			t.Errorf("README.md's component table does not name `pkg/%s`", e.Name())
		}
	}
}

// caseIDs are the cases docs/cases.md defines, and the ids its introduction says were never
// assigned ("Ids not listed (…) were never assigned", single ids and ranges).
func caseIDs(t *testing.T) (defined, unassigned map[string]bool) {
	t.Helper()
	s := readDoc(t, "docs/cases.md")
	defined = map[string]bool{}
	for _, m := range caseDefRE.FindAllStringSubmatch(s, -1) {
		if defined[m[1]] {
			t.Errorf("docs/cases.md defines %s twice", m[1])
		}
		defined[m[1]] = true
	}
	if len(defined) == 0 {
		t.Fatal("docs/cases.md defines no case (- **C01** …)")
	}
	unassigned = map[string]bool{}
	for _, l := range unassignedRE.FindAllStringSubmatch(s, -1) {
		for _, r := range idRangeRE.FindAllStringSubmatch(l[1], -1) {
			from, _ := strconv.Atoi(r[1])
			to := from
			if r[2] != "" {
				to, _ = strconv.Atoi(r[2])
			}
			for n := from; n <= to; n++ {
				unassigned[fmt.Sprintf("C%02d", n)] = true
			}
		}
	}
	return defined, unassigned
}

// blankUnassigned blanks out, in docs/cases.md's text, the sentence listing the ids never
// assigned (keeping its newlines), so that its ids do not count as citations.
func blankUnassigned(s string) string {
	return unassignedRE.ReplaceAllStringFunc(s, func(m string) string {
		return strings.Map(func(r rune) rune {
			if r == '\n' {
				return r
			}
			return ' '
		}, m)
	})
}

// Every case id the docs, the tests and the code cite is a case of docs/cases.md; the ids cases.md says
// were never assigned are exactly the ones it does not define, up to its last case.
func TestCitedCasesExist(t *testing.T) {
	defined, unassigned := caseIDs(t)
	highest := 0
	for id := range defined {
		n, _ := strconv.Atoi(id[1:])
		highest = max(highest, n)
		if unassigned[id] {
			t.Errorf("docs/cases.md defines %s and lists it as never assigned", id)
		}
	}
	for n := 1; n <= highest; n++ {
		id := fmt.Sprintf("C%02d", n)
		if !defined[id] && !unassigned[id] {
			t.Errorf("docs/cases.md neither defines %s nor lists it as never assigned", id)
		}
	}
	for _, doc := range docFiles(t) {
		s := readDoc(t, doc)
		if doc == "docs/cases.md" {
			s = blankUnassigned(s)
		}
		for i, l := range strings.Split(s, "\n") {
			for _, m := range caseRE.FindAllStringSubmatch(l, -1) {
				if !defined[m[1]] {
					t.Errorf("%s:%d cites case %s, which docs/cases.md does not define", doc, i+1, m[1])
				}
			}
		}
	}
	r := scanRepo(t)
	for _, cases := range []map[string][]string{r.cases, r.codeCases} {
		for id, files := range cases {
			if !defined[id] {
				t.Errorf("%s cite case %s, which docs/cases.md does not define", strings.Join(files, ", "), id)
			}
		}
	}
}

// Every case of docs/cases.md is cited by at least one test: a test's name (TestC13…) or a
// comment in a _test.go (// case C13).
func TestEveryCaseHasATest(t *testing.T) {
	defined, _ := caseIDs(t)
	r := scanRepo(t)
	ids := make([]string, 0, len(defined))
	for id := range defined {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if len(r.cases[id]) == 0 {
			t.Errorf("case %s of docs/cases.md is cited by no _test.go (name a test TestC…, or say \"case %s\" in the comment of the test that covers it)", id, id)
		}
	}
}

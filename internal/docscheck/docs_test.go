package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

const root = "../.."

// maxReadmeLines is the README's budget: a front door, not a manual.
const maxReadmeLines = 320

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// pages are README.md, CHANGELOG.md and every docs/*.md, relative to root.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("docs/ has no pages")
	}
	out := []string{"README.md", "CHANGELOG.md"}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		out = append(out, rel)
	}
	return out
}

func TestReadmeIsOnePage(t *testing.T) {
	n := strings.Count(read(t, filepath.Join(root, "README.md")), "\n")
	if n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move the detail to a page of docs/", n, maxReadmeLines)
	}
}

var (
	linkRE  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	fenceRE = regexp.MustCompile("(?s)```.*?```")
	codeRE  = regexp.MustCompile("`[^`\n]*`")
)

// links returns the relative link targets of a markdown text (code spans
// and fenced blocks left out).
func links(md string) []string {
	md = fenceRE.ReplaceAllString(md, "")
	md = codeRE.ReplaceAllString(md, "")
	var out []string
	for _, m := range linkRE.FindAllStringSubmatch(md, -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		out = append(out, target)
	}
	return out
}

// anchors returns the anchors GitHub gives the headings of a markdown
// text: lower case, punctuation other than - and _ dropped, spaces to -,
// a repeated heading suffixed -1, -2, ….
func anchors(md string) map[string]bool {
	md = fenceRE.ReplaceAllString(md, "")
	seen := map[string]int{}
	out := map[string]bool{}
	for _, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func itoa(n int) string {
	s := ""
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}

func TestRelativeLinksResolve(t *testing.T) {
	for _, page := range pages(t) {
		text := read(t, filepath.Join(root, page))
		for _, target := range links(text) {
			file, anchor, _ := strings.Cut(target, "#")
			path := filepath.Join(root, page)
			if file != "" {
				path = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %q: %v", page, target, err)
				continue
			}
			if anchor == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			if !anchors(read(t, path))[anchor] {
				t.Errorf("%s: link %q: %s has no heading with anchor #%s", page, target, file, anchor)
			}
		}
	}
}

// TestEveryDocsPageIsReachableFromTheReadme follows the links from
// README.md through docs/ and fails naming a page no link reaches.
func TestEveryDocsPageIsReachableFromTheReadme(t *testing.T) {
	reached := map[string]bool{"README.md": true}
	queue := []string{"README.md"}
	for len(queue) > 0 {
		page := queue[0]
		queue = queue[1:]
		for _, target := range links(read(t, filepath.Join(root, page))) {
			file, _, _ := strings.Cut(target, "#")
			if !strings.HasSuffix(file, ".md") {
				continue
			}
			rel := filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(page), file)))
			if !reached[rel] {
				reached[rel] = true
				queue = append(queue, rel)
			}
		}
	}
	for _, page := range pages(t) {
		if !reached[filepath.ToSlash(page)] {
			t.Errorf("%s is not reachable by links from README.md", page)
		}
	}
}

func TestAnchors(t *testing.T) {
	got := anchors("# A house\n## eb:To matching (AS4)\n## Reload\n## Reload\n```\n# not a heading\n```\n")
	for _, want := range []string{"a-house", "ebto-matching-as4", "reload", "reload-1"} {
		if !got[want] {
			t.Errorf("anchors: %q missing from %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a line in a fenced block is not a heading")
	}
}

// TestArchitectureNamesEveryPublicPackage: the table under "### Public
// packages" in docs/architecture.md's package map is exactly the list of
// packages outside internal/ (directories with Go files other than tests):
// a public package the page does not list fails (it is importable by other
// modules, so the page must say it is API), and so does a package the page
// calls public that does not exist or lies under internal/ (the page would
// promise an API that is not there).
func TestArchitectureNamesEveryPublicPackage(t *testing.T) {
	doc := read(t, filepath.Join(root, "docs", "architecture.md"))
	start := strings.Index(doc, "\n## Package map\n")
	if start < 0 {
		t.Fatal("docs/architecture.md has no section \"## Package map\"")
	}
	named := publicTable(t, doc[start:])
	var public []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (name == "internal" || name == "testdata" || name == "var" || strings.HasPrefix(name, ".")) {
			return filepath.SkipDir
		}
		files, _ := filepath.Glob(filepath.Join(path, "*.go"))
		for _, f := range files {
			if !strings.HasSuffix(f, "_test.go") {
				rel, _ := filepath.Rel(root, path)
				public = append(public, filepath.ToSlash(rel))
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(public) < 10 {
		t.Fatalf("found only %d public packages: the walk is broken", len(public))
	}
	for _, p := range public {
		if !slices.Contains(named, p) {
			t.Errorf("package %s is public (outside internal/) but docs/architecture.md's public package table does not list it", p)
		}
	}
	for _, p := range named {
		switch {
		case p == "internal" || strings.HasPrefix(p, "internal/") || strings.Contains(p, "/internal/") || strings.HasSuffix(p, "/internal"):
			t.Errorf("docs/architecture.md lists %s as public, but it is under internal/ and cannot be imported by other modules", p)
		case !slices.Contains(public, p):
			t.Errorf("docs/architecture.md lists %s as public, but there is no such package (moved, renamed or removed?)", p)
		}
	}
}

// publicTable returns the first column of the table under "### Public
// packages" in the package map (up to the next heading).
func publicTable(t *testing.T, packageMap string) []string {
	t.Helper()
	start := strings.Index(packageMap, "\n### Public packages\n")
	if start < 0 {
		t.Fatal("docs/architecture.md's package map has no \"### Public packages\" section")
	}
	section := packageMap[start+1:]
	if end := strings.Index(section[1:], "\n#"); end >= 0 {
		section = section[:end+1]
	}
	var named []string
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		cell := strings.TrimSpace(cells[1])
		if len(cell) > 2 && strings.HasPrefix(cell, "`") && strings.HasSuffix(cell, "`") {
			named = append(named, strings.Trim(cell, "`"))
		}
	}
	if len(named) == 0 {
		t.Fatal("docs/architecture.md's \"### Public packages\" section has no table of packages")
	}
	return named
}

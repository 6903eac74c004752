package yamlkeys

import (
	"reflect"
	"testing"
)

func TestLevenshtein(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"lease", "lease", 0}, {"leese", "lease", 1}, {"lisen", "listen", 1}, {"", "abc", 3}, {"kitten", "sitting", 3}} {
		if got := Levenshtein(c.a, c.b); got != c.d {
			t.Errorf("Levenshtein(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}

type inner struct {
	Mode string `yaml:"mode"`
}

type shared struct {
	Trust string `yaml:"trust"`
}

type outer struct {
	Name   string            `yaml:"name"`
	Inner  *inner            `yaml:"inner"`
	List   []inner           `yaml:"list"`
	ByName map[string]inner  `yaml:"by_name"`
	Shared shared            `yaml:",inline"`
	Raw    map[string]string `yaml:"raw"`
	Skip   string            `yaml:"-"`
}

func TestCheck(t *testing.T) {
	doc := []byte("name: x\ntrust: pinned\ninner: {mode: a, mdoe: b}\nlist:\n  - mode: a\n  - moed: b\nby_name:\n  one: {mod: c}\nraw: {anything: goes}\nskip: 1\nbase: &b {mode: a}\nwith: {<<: *b, extra: 1}\n")
	got := Check(doc, reflect.TypeFor[outer](), "yaml")
	want := []Unknown{
		{Path: "inner.mdoe", Line: 3, Column: 18, Nearest: "inner.mode"},
		{Path: "list[1].moed", Line: 6, Column: 5, Nearest: "list[1].mode"},
		{Path: "by_name.one.mod", Line: 8, Column: 9, Nearest: "by_name.one.mode"},
		{Path: "skip", Line: 10, Column: 1},
		{Path: "base", Line: 11, Column: 1, Nearest: "name"},
		{Path: "with", Line: 12, Column: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Check =\n%#v\nwant\n%#v", got, want)
	}
	if got := Check([]byte("name: [unclosed"), reflect.TypeFor[outer](), "yaml"); got != nil {
		t.Errorf("invalid YAML: %+v, want nothing (the decoder reports it)", got)
	}
}

// Package yamlkeys finds the keys of a YAML configuration file that the Go
// struct it is decoded into does not have, with the line of each and the
// nearest key it does have (a misspelt key would otherwise be reported
// without its place: viper names neither the file nor the line).
package yamlkeys

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Unknown is a key the struct does not have.
type Unknown struct {
	// Path is the key with its parents, as the configuration names it
	// ("admin.lisen", "handlers[1].dir.inbx").
	Path string
	// Line and Column are where the key is written (1-based).
	Line, Column int
	// Nearest is the valid key at that place closest to it ("" when none
	// is close), with its parents.
	Nearest string
}

func (u Unknown) String() string {
	s := fmt.Sprintf("unknown key %q", u.Path)
	if u.Nearest != "" {
		s += fmt.Sprintf(" (did you mean %q?)", u.Nearest)
	}
	return s
}

// Check returns the keys of the YAML document doc that the struct type t
// does not have. tag is the struct tag naming the keys ("yaml" or
// "mapstructure"); ",inline" and ",squash" fields add their fields to their
// parent's. mapstructure keys are matched without regard to case, as viper
// does. A document that is not valid YAML is the decoder's to report: Check
// returns no unknown keys for it.
func Check(doc []byte, t reflect.Type, tag string) []Unknown {
	var root yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(doc)).Decode(&root); err != nil {
		return nil // empty (io.EOF) or for the decoder to report
	}
	c := checker{tag: tag, fold: tag == "mapstructure"}
	c.walk(&root, t, "")
	return c.out
}

type checker struct {
	tag  string
	fold bool
	out  []Unknown
}

func (c *checker) walk(n *yaml.Node, t reflect.Type, path string) {
	for n.Kind == yaml.DocumentNode || n.Kind == yaml.AliasNode {
		if n.Kind == yaml.DocumentNode {
			if len(n.Content) == 0 {
				return
			}
			n = n.Content[0]
		} else {
			n = n.Alias
		}
		if n == nil {
			return
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if custom(t) {
		return // it reads its own node
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return
		}
		fields := map[string]reflect.Type{}
		var names []string
		c.fields(t, fields, &names)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "<<" { // a merge key: its mapping's keys count
				c.walk(v, t, path)
				continue
			}
			name := k.Value
			if c.fold {
				name = strings.ToLower(name)
			}
			ft, ok := fields[name]
			if !ok {
				u := Unknown{Path: join(path, k.Value), Line: k.Line, Column: k.Column}
				if near := nearest(name, names); near != "" {
					u.Nearest = join(path, near)
				}
				c.out = append(c.out, u)
				continue
			}
			c.walk(v, ft, join(path, k.Value))
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return
		}
		for i, item := range n.Content {
			c.walk(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			c.walk(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value))
		}
	}
}

// fields adds the keys of struct type t (and of its inlined structs).
func (c *checker) fields(t reflect.Type, out map[string]reflect.Type, names *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		parts := strings.Split(f.Tag.Get(c.tag), ",")
		name := parts[0]
		if name == "-" {
			continue
		}
		inline := false
		for _, p := range parts[1:] {
			inline = inline || p == "inline" || p == "squash"
		}
		if inline || (f.Anonymous && name == "" && c.tag == "mapstructure") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				c.fields(ft, out, names)
				continue
			}
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if c.fold {
			name = strings.ToLower(name)
		}
		out[name] = f.Type
		*names = append(*names, name)
	}
}

var unmarshaler = reflect.TypeFor[yaml.Unmarshaler]()

// custom reports types that decode themselves from a node.
func custom(t reflect.Type) bool {
	return t.Implements(unmarshaler) || reflect.PointerTo(t).Implements(unmarshaler)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// nearest is the name closest to key by edit distance, if it is close
// enough to be a likely misspelling: at most a third of the longer one's
// letters differ (at least 2 edits are always allowed).
func nearest(key string, names []string) string {
	best, bestD := "", -1
	for _, n := range names {
		d := Levenshtein(key, n)
		if bestD < 0 || d < bestD {
			best, bestD = n, d
		}
	}
	if bestD < 0 || bestD > max(2, max(len(key), len(best))/3) {
		return ""
	}
	return best
}

// Levenshtein is the edit distance (insertions, deletions, substitutions)
// between a and b, by bytes.
func Levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

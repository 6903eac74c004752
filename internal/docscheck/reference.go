// Package docscheck holds the checks that keep the documentation true to the
// code: the configuration reference names every key (used by the config and
// partners tests), links resolve, every page is reachable from the README,
// and the architecture page names every public package.
package docscheck

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"
)

// ReferenceKeys lists the keys of t's fields, by the struct tag tag
// ("mapstructure" for gateway.yaml, "yaml" for partner files),
// recursively: a nested block's keys are dotted (admin.tls.cert), a list
// of blocks is name[] followed by its fields (handlers[].http.url); inline
// and squashed fields add their keys at the same level. Fields tagged "-"
// are not keys.
func ReferenceKeys(t reflect.Type, tag string) []string {
	return referenceKeys(t, "", tag)
}

func referenceKeys(t reflect.Type, prefix string, tag string) []string {
	var keys []string
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get(tag), ",")
		if name == "-" {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if opts == "inline" || opts == "squash" || (name == "" && f.Anonymous) {
			keys = append(keys, referenceKeys(ft, prefix, tag)...)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		key := name
		if prefix != "" {
			key = prefix + "." + name
		}
		switch {
		case ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Duration]():
			keys = append(keys, referenceKeys(ft, key, tag)...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			keys = append(keys, key+"[]")
			keys = append(keys, referenceKeys(ft.Elem(), key+"[]", tag)...)
		default:
			keys = append(keys, key)
		}
	}
	return keys
}

// MissingFromSection returns the keys that the markdown file does not
// write, in backquotes, in its section "## heading" (up to the next
// level-2 heading).
func MissingFromSection(file, heading string, keys []string) ([]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("docscheck: %w", err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## "+heading+"\n")
	if start < 0 {
		return nil, fmt.Errorf("docscheck: %s has no section %q", file, "## "+heading)
	}
	section := doc[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	var missing []string
	for _, k := range keys {
		if !strings.Contains(section, "`"+k+"`") {
			missing = append(missing, k)
		}
	}
	return missing, nil
}

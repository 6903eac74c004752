package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// referenceKeys lists the gateway.yaml keys of t's fields, by their
// mapstructure tags, recursively: a nested block's keys are dotted
// (admin.tls.cert), a list of blocks is name[] followed by its fields
// (handlers[].http.url). Fields tagged "-" are not keys.
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

// docSection returns the part of the markdown file from the line
// "## heading" to the next level-2 heading.
func docSection(t *testing.T, file, heading string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the configuration reference: %v", err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## "+heading+"\n")
	if start < 0 {
		t.Fatalf("%s has no section %q", file, "## "+heading)
	}
	section := doc[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	return section
}

// TestConfigurationReferenceNamesEveryKey fails, naming the key, when a
// gateway.yaml key (a mapstructure field of Config, at any depth) is not
// written, in backquotes, in the "gateway.yaml keys" section of
// docs/configuration.md.
func TestConfigurationReferenceNamesEveryKey(t *testing.T) {
	section := docSection(t, "../docs/configuration.md", "gateway.yaml keys")
	keys := referenceKeys(reflect.TypeFor[Config](), "", "mapstructure")
	if len(keys) < 100 {
		t.Fatalf("found only %d keys in Config: the walk is broken", len(keys))
	}
	for _, k := range keys {
		if !strings.Contains(section, "`"+k+"`") {
			t.Errorf("gateway.yaml key %s is missing from docs/configuration.md (section \"gateway.yaml keys\"): add a row with its type, default and meaning", k)
		}
	}
}

package migrate

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoadOrdersByVersion(t *testing.T) {
	fsys := fstest.MapFS{
		"m/0002_b.sql": {Data: []byte("B")},
		"m/0001_a.sql": {Data: []byte("A")},
		"m/README":     {Data: []byte("ignored")},
	}
	got, err := Load(fsys, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != (Migration{1, "0001_a", "A"}) || got[1] != (Migration{2, "0002_b", "B"}) {
		t.Fatalf("got %+v", got)
	}
}

func TestLoadRejects(t *testing.T) {
	for name, fsys := range map[string]fstest.MapFS{
		"gap":      {"m/0001_a.sql": {}, "m/0003_c.sql": {}},
		"repeat":   {"m/0001_a.sql": {}, "m/0001_b.sql": {}},
		"no-num":   {"m/a.sql": {}},
		"zero":     {"m/0000_a.sql": {}},
		"empty":    {"m/x.txt": {}},
		"no-start": {"m/0002_b.sql": {}},
	} {
		if _, err := Load(fsys, "m"); err == nil || !strings.HasPrefix(err.Error(), "migrate: ") {
			t.Errorf("%s: error %v", name, err)
		}
	}
}

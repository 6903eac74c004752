package main

import "testing"

// TestGCSettings: serve raises GOGC with a soft memory limit from the
// memory budget unless the environment chooses (GOGC or GOMEMLIMIT set) or
// there is no budget to bound the heap.
func TestGCSettings(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	if p, l, ok := gcSettings(1<<30, env()); !ok || p != 400 || l != 2<<30+256<<20 {
		t.Fatalf("default: %d %d %v", p, l, ok)
	}
	for name, c := range map[string]struct {
		budget int64
		env    func(string) string
	}{
		"GOGC set":       {1 << 30, env("GOGC", "100")},
		"GOGC off":       {1 << 30, env("GOGC", "off")},
		"GOMEMLIMIT set": {1 << 30, env("GOMEMLIMIT", "4GiB")},
		"no budget":      {0, env()},
	} {
		if p, l, ok := gcSettings(c.budget, c.env); ok {
			t.Errorf("%s: tuned to %d, limit %d", name, p, l)
		}
	}
}

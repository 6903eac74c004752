// Package interop locates the shared vendor interop vectors for tests.
package interop

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Dir returns the interop directory ($GATEWAY_INTEROP_DIR, else ../shared/interop
// beside the project root) or skips the test with a message when it is absent.
// Under CI=true a missing directory fails the test instead.
func Dir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("GATEWAY_INTEROP_DIR"); d != "" {
		if _, err := os.Stat(d); err == nil {
			return d
		}
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(filepath.Dir(file)))
	d := filepath.Join(root, "..", "shared", "interop")
	if _, err := os.Stat(filepath.Join(d, "README.md")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("interop vectors not found at %s and GATEWAY_INTEROP_DIR unset (CI=true requires them)", d)
		}
		t.Skipf("interop vectors not found at %s; set GATEWAY_INTEROP_DIR to run this test", d)
	}
	return d
}

// Read returns the bytes of a file below the interop directory.
func Read(t testing.TB, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Dir(t), rel))
	if err != nil {
		t.Fatalf("interop: %v", err)
	}
	return b
}

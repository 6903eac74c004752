package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func demoConfig(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "fixture", "gateway.yaml")
}

func TestPartnersCheckDemo(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"partners", "check", "-config", demoConfig(t)}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "ok demo: [as2 DEMO") || !strings.Contains(out.String(), "1 partners, 0 warnings") {
		t.Fatalf("output:\n%s", out.String())
	}
}

func TestPartnersCheckReportsFileAndField(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("id: bad\nas2:\n  as2_id: X\n  colour: red\n"), 0o600)
	var out, errb bytes.Buffer
	code := run([]string{"partners", "check", "-dir", dir}, &out, &errb)
	if code != 1 || !strings.Contains(out.String(), "error: "+filepath.Join(dir, "bad.yaml")) || !strings.Contains(out.String(), "colour") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{nil, {"frobnicate"}, {"partners"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 || !strings.Contains(errb.String(), "usage:") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "gateway ") {
		t.Errorf("version: %d %q", code, out.String())
	}
}

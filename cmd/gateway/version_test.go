package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionFromBuildInfo(t *testing.T) {
	rev := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}
	for _, c := range []struct {
		main     string
		settings []debug.BuildSetting
		want     string
	}{
		{"v1.4.2", nil, "v1.4.2 go1.26.8"},
		{"v0.0.0-20261201200000-0123456789ab+dirty", rev, "v0.0.0-20261201200000-0123456789ab+dirty go1.26.8"},
		{"(devel)", rev, "devel-0123456789ab+dirty go1.26.8"},
		{"(devel)", nil, "devel go1.26.8"},
		{"", nil, "devel go1.26.8"},
	} {
		bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "gateway", Version: c.main}, Settings: c.settings}
		if got := versionFrom(bi); got != c.want {
			t.Errorf("main %q: %q, want %q", c.main, got, c.want)
		}
	}
}

// TestGoInstallStampsVersion runs `go install ./cmd/gateway` as an
// operator would, then `gateway version`: in a git checkout the version
// carries the commit.
func TestGoInstallStampsVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	gobin := t.TempDir()
	install := exec.Command("go", "install", "-buildvcs=auto", "./cmd/gateway")
	install.Dir = root
	install.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(gobin, "gateway"), "version").CombinedOutput()
	if err != nil {
		t.Fatalf("gateway version: %v %s", err, out)
	}
	got := strings.TrimSpace(string(out))
	if !strings.HasPrefix(got, "gateway ") || !strings.HasSuffix(got, runtime.Version()) {
		t.Fatalf("gateway version: %q", got)
	}
	// The go command stamps VCS information only where .git is a
	// directory (a clone; not a git worktree, whose .git is a file).
	if fi, err := os.Stat(filepath.Join(root, ".git")); err != nil || !fi.IsDir() {
		t.Logf("not a git clone; version %q", got)
		return
	}
	git := exec.Command("git", "rev-parse", "--short=12", "HEAD")
	git.Dir = root
	var rev bytes.Buffer
	git.Stdout = &rev
	if git.Run() != nil {
		t.Logf("not a git checkout; version %q", got)
		return
	}
	if !strings.Contains(got, strings.TrimSpace(rev.String())) {
		t.Fatalf("gateway version %q does not name commit %s", got, rev.String())
	}
	t.Logf("%s", got)
}

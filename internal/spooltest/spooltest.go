// Package spooltest tells tests what a spool directory still holds.
//
// limits keeps up to 64 emptied body files per spool directory for reuse
// (creating a file costs more than reopening one), so "nothing left" means
// no file with bytes in it and no file other than such an emptied body
// file: that is what Leftovers lists.
package spooltest

import (
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// spareBodyPrefix is the name prefix of the body files limits reuses.
const spareBodyPrefix = "gateway-body-"

// Leftovers lists, relative to dir and walking its subdirectories, every
// file that holds bytes or is not an emptied body file kept for reuse
// (spool areas' .lock files aside).
func Leftovers(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || strings.HasSuffix(d.Name(), ".lock") {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Size() != 0 || !strings.HasPrefix(d.Name(), spareBodyPrefix) {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("spooltest: walk %s: %v", dir, err)
	}
	return out
}

// LeftoversAfter is Leftovers once dir is clean or within d: an endpoint
// removes an exchange's spool files right after it has sent the reply, so
// a client holding the reply may look a moment too early.
func LeftoversAfter(t testing.TB, dir string, d time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		left := Leftovers(t, dir)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(10 * time.Millisecond)
	}
}

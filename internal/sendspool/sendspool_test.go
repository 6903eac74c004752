package sendspool

import (
	"io"
	"os"
	"runtime"
	"testing"
)

// TestSpoolFile: what is written is read back whole, twice, from the
// start; on Unix nothing is visible in the directory even while the file
// is open, and nothing is left after Close anywhere.
func TestSpoolFile(t *testing.T) {
	dir := t.TempDir()
	f, err := Create(dir, "test-*.spool")
	if err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(dir); runtime.GOOS != "windows" && len(left) != 0 {
		t.Errorf("an open spool file is visible: %v", left)
	}
	for range 1000 {
		io.WriteString(f, "0123456789")
	}
	if err := f.Finish(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("x")); err == nil {
		t.Error("write after Finish accepted")
	}
	for i := 0; i < 2; i++ {
		rc, _ := f.Open()
		b, err := io.ReadAll(rc)
		if err != nil || len(b) != 10000 || string(b[9990:]) != "0123456789" || f.Size() != 10000 {
			t.Fatalf("read %d: %d bytes, %v", i, len(b), err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

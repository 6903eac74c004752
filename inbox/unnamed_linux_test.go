package inbox

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/edigateway/gateway/exchange"
)

// createdNames returns the names created in dir (inotify IN_CREATE, which
// a link also raises) while f runs.
func createdNames(t *testing.T, dir string, f func()) []string {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Skipf("inotify: %v", err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		t.Fatal(err)
	}
	f()
	var names []string
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, buf)
		if err != nil || n <= 0 {
			break
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			names = append(names, string(bytes.TrimRight(name, "\x00")))
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
	return names
}

// TestNoTemporaryNames: on Linux a payload and its sidecar are written as
// files without a name and linked once synced, so the partner directory
// sees only the two final names (no temporary name created and removed),
// sidecar first.
func TestNoTemporaryNames(t *testing.T) {
	for _, viaProc := range []bool{false, true} {
		// Linking the descriptor (AT_EMPTY_PATH, with the capability) and
		// through /proc/self/fd.
		emptyPathOff.Store(viaProc)
		testNoTemporaryNames(t)
	}
	emptyPathOff.Store(false)
}

func testNoTemporaryNames(t *testing.T) {
	root := t.TempDir()
	h := Dir{Root: root}
	m := msg(payload("a.edi", "UNB+1'"))
	if err := h.Handle(context.Background(), msg(payload("warm.edi", "x"))); err != nil { // makes the partner directory
		t.Fatal(err)
	}
	dir := filepath.Join(root, "acme")
	names := createdNames(t, dir, func() {
		if err := h.Handle(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	})
	want := []string{FileName(m, 0) + SidecarSuffix, FileName(m, 0)}
	if strings.Join(names, "\n") != strings.Join(want, "\n") {
		t.Fatalf("names created in the partner directory: %q, want %q", names, want)
	}
}

// TestNamedTemporaryFallback: where a file without a name cannot be linked
// (no /proc), the handler writes through named temporary files instead and
// keeps its guarantees: complete files under the final names, no temporary
// file left, an identical rewrite accepted, other content refused.
func TestNamedTemporaryFallback(t *testing.T) {
	unnamedOff.Store(true)
	defer unnamedOff.Store(false)
	root := t.TempDir()
	h := Dir{Root: root}
	m := msg(payload("a.edi", "UNB+1'"))
	dir := filepath.Join(root, "acme")
	if err := h.Handle(context.Background(), msg(payload("warm.edi", "x"))); err != nil {
		t.Fatal(err)
	}
	names := createdNames(t, dir, func() {
		if err := h.Handle(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	})
	// Both temporary files (written at the same time), then the sidecar's
	// name, then the payload's.
	if len(names) != 4 || !strings.HasPrefix(names[0], ".tmp-") || !strings.HasPrefix(names[1], ".tmp-") ||
		names[2] != FileName(m, 0)+SidecarSuffix || names[3] != FileName(m, 0) {
		t.Fatalf("names created: %q", names)
	}
	if err := h.Handle(context.Background(), m); err != nil {
		t.Fatalf("same message again: %v", err)
	}
	// The same name (transport key and declared hash) with other bytes.
	other := msg(exchange.NewPayload(exchange.Payload{Filename: "a.edi", ContentType: "application/edifact", SHA256: m.Payloads[0].SHA256},
		exchange.MemoryBody("UNB+2'")))
	if err := h.Handle(context.Background(), other); err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Fatalf("other content under the same name: %v", err)
	}
	files, _ := Payloads(dir)
	entries, _ := filepath.Glob(filepath.Join(dir, ".tmp-*"))
	if len(files) != 2 || len(entries) != 0 {
		t.Fatalf("payloads %v, temporary files left %v", files, entries)
	}
}

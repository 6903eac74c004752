//go:build linux

package audit_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/edigateway/gateway/audit"
)

// TestJSONFileFullDiskKernel runs the sink in a child process whose file
// size limit (RLIMIT_FSIZE) stands in for a full disk: the kernel accepts the
// first bytes of a record and refuses the rest. After "space returns" (the
// limit is raised) the next record must start on its own line and the file
// must hold only whole records.
func TestJSONFileFullDiskKernel(t *testing.T) {
	if path := os.Getenv("AUDIT_FSIZE_CHILD"); path != "" {
		fullDiskChild(path)
		return
	}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	cmd := exec.Command(os.Args[0], "-test.run=^TestJSONFileFullDiskKernel$")
	cmd.Env = append(os.Environ(), "AUDIT_FSIZE_CHILD="+path)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "child: write refused") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(path)
	recs := wholeLines(t, b)
	if len(recs) != 2 || recs[0].MessageID != "before" || recs[1].MessageID != "after" {
		t.Fatalf("records %+v in\n%q", recs, b)
	}
}

func fullDiskChild(path string) {
	signal.Ignore(syscall.SIGXFSZ) // a write past the limit fails with EFBIG instead of killing us
	ctx := context.Background()
	f, err := audit.OpenJSONFile(path)
	if err != nil {
		panic(err)
	}
	if err := f.Write(ctx, audit.Record{Step: audit.StepReceived, MessageID: "before"}); err != nil {
		panic(err)
	}
	st, _ := os.Stat(path)
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_FSIZE, &lim)
	saved := lim.Cur
	lim.Cur = uint64(st.Size()) + 20 // room for 20 bytes of the next record
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		panic(err)
	}
	err = f.Write(ctx, audit.Record{Step: audit.StepReceived, MessageID: "lost", Error: strings.Repeat("x", 200)})
	if err == nil {
		panic("write past the size limit succeeded")
	}
	os.Stdout.WriteString("child: write refused: " + err.Error() + "\n")
	lim.Cur = saved
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		panic(err)
	}
	if err := f.Write(ctx, audit.Record{Step: audit.StepReceived, MessageID: "after"}); err != nil {
		panic(err)
	}
	f.Close()
}

// wholeLines parses every line of b as a record and fails on a fragment.
func wholeLines(t *testing.T, b []byte) []audit.Record {
	t.Helper()
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Errorf("file ends inside a record: %q", b)
	}
	var out []audit.Record
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var r audit.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Errorf("invalid JSON line %q: %v", sc.Text(), err)
			continue
		}
		out = append(out, r)
	}
	return out
}

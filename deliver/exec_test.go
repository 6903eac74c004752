//go:build unix

package deliver

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "handler.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

func newExec(t *testing.T, c ExecConfig) *Exec {
	t.Helper()
	if c.Name == "" {
		c.Name = "map"
	}
	e, err := NewExec(c)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

type logLines struct{ buf bytes.Buffer }

func (l *logLines) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(&l.buf, nil)) }

func (l *logLines) records(t *testing.T, msg string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		var r map[string]any
		if line == "" {
			continue
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

func TestExecPayloadOnStdinMetadataInEnvironment(t *testing.T) {
	out := t.TempDir()
	work := t.TempDir()
	t.Setenv("GATEWAY_TEST_SECRET", "do-not-pass")
	t.Setenv("ERP_DSN", "passed")
	sh := script(t, `n=$GATEWAY_PAYLOAD_INDEX
cat > "`+out+`/payload.$n"
env > "`+out+`/env.$n"
pwd > "`+out+`/pwd.$n"
`)
	e := newExec(t, ExecConfig{Command: []string{sh}, Dir: work, Env: []string{"ERP_DSN"}})
	m := testMessage()
	if err := e.Handle(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	for i, p := range m.Payloads {
		n := strconv.Itoa(i + 1)
		body, _ := os.ReadFile(filepath.Join(out, "payload."+n))
		r, _ := p.Open()
		var want bytes.Buffer
		want.ReadFrom(r)
		if !bytes.Equal(body, want.Bytes()) {
			t.Errorf("payload %d on stdin: %q", i+1, body)
		}
		if pwd, _ := os.ReadFile(filepath.Join(out, "pwd."+n)); strings.TrimSpace(string(pwd)) != work {
			t.Errorf("working dir %q, want %q", pwd, work)
		}
	}
	envb, _ := os.ReadFile(filepath.Join(out, "env.1"))
	env := map[string]string{}
	for _, kv := range strings.Split(string(envb), "\n") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	want := map[string]string{
		"GATEWAY_PARTNER": "acme", "GATEWAY_PROTOCOL": "as4", "GATEWAY_MESSAGE_ID": "m-1@acme.example",
		"GATEWAY_IDEMPOTENCY_KEY": m.Payloads[0].IdempotencyKey, "GATEWAY_MESSAGE_IDEMPOTENCY_KEY": m.IdempotencyKey,
		"GATEWAY_CONTENT_TYPE": "application/EDIFACT", "GATEWAY_FILENAME": "rechnung-%C3%BC%0D%0AX-Evil: 1.edi",
		"GATEWAY_SHA256": m.Payloads[0].SHA256, "GATEWAY_REFERENCE": "REF1", "GATEWAY_INTERCHANGE_KEY": m.Payloads[0].IdempotencyKey,
		"GATEWAY_INTERCHANGE_SENDER": "ACME", "GATEWAY_SERVICE": "urn:invoicing", "GATEWAY_ACTION": "Deliver",
		"GATEWAY_PAYLOAD_COUNT": "2", "GATEWAY_SIZE": strconv.FormatInt(m.Payloads[0].Size, 10),
		"ERP_DSN": "passed", "PATH": os.Getenv("PATH"),
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if _, ok := env["GATEWAY_TEST_SECRET"]; ok {
		t.Error("an unlisted variable of the gateway's environment reached the command")
	}
}

func TestExecNonZeroExitFailsAndStderrIsLogged(t *testing.T) {
	var logs logLines
	sh := script(t, "cat >/dev/null\necho 'mapping failed: segment UNH missing' >&2\nexit 3\n")
	e := newExec(t, ExecConfig{Command: []string{sh}, Log: logs.logger()})
	err := e.Handle(context.Background(), testMessage())
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "segment UNH missing") ||
		!strings.Contains(err.Error(), "payload 1 of 2") {
		t.Fatalf("err = %v", err)
	}
	recs := logs.records(t, "command stderr")
	if len(recs) != 1 || recs[0]["line"] != "mapping failed: segment UNH missing" || recs[0]["message_id"] != "m-1@acme.example" {
		t.Fatalf("stderr log: %v", recs)
	}
}

func TestExecTimeoutKillsTheProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	sh := script(t, "sleep 60 &\necho $! > "+pidFile+"\nwait\n")
	e := newExec(t, ExecConfig{Command: []string{sh}, Timeout: 300 * time.Millisecond})
	start := time.Now()
	err := e.Handle(context.Background(), testMessage())
	if err == nil || !strings.Contains(err.Error(), "killed after timeout 300ms") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 {
		t.Fatalf("no child pid: %q", b)
	}
	deadline := time.Now().Add(3 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("child %d of the timed-out command still runs", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestExecHugeOutputIsBounded(t *testing.T) {
	var logs logLines
	// 64 MiB of stdout, 200000 stderr lines and one 1 MiB stderr line.
	sh := script(t, "cat >/dev/null\nhead -c 67108864 /dev/zero\nyes 'warning: something' | head -n 200000 >&2\nhead -c 1048576 /dev/zero | tr '\\0' y >&2\nexit 0\n")
	e := newExec(t, ExecConfig{Command: []string{sh}, MaxOutputBytes: 4096, Log: logs.logger()})
	if err := e.Handle(context.Background(), testMessage()); err != nil {
		t.Fatal(err)
	}
	recs := logs.records(t, "command stderr")
	// 4096 bytes of budget per run (one run per payload).
	logged := 0
	for _, r := range recs {
		logged += len(r["line"].(string)) + 1
	}
	if len(recs) == 0 || logged > 2*4096 {
		t.Fatalf("%d stderr lines, %d bytes logged", len(recs), logged)
	}
	if n := len(logs.records(t, "command stderr over the output limit; rest not logged")); n != 2 {
		t.Errorf("%d truncation notes, want 2", n)
	}
	t.Logf("%d stderr records, log %d bytes, for 2 runs of 64 MiB stdout and 4.8 MB stderr", len(recs), logs.buf.Len())
	if logs.buf.Len() > 256<<10 { // against 65 MiB written
		t.Errorf("log holds %d bytes", logs.buf.Len())
	}
}

func TestExecLongLineIsCut(t *testing.T) {
	var logs logLines
	sh := script(t, "head -c 100000 /dev/zero | tr '\\0' y >&2\necho >&2\nexit 1\n")
	e := newExec(t, ExecConfig{Command: []string{sh}, Log: logs.logger()})
	err := e.Handle(context.Background(), testMessage())
	if err == nil || len(err.Error()) > 1024 {
		t.Fatalf("err (%d bytes) = %.200v", len(err.Error()), err)
	}
	recs := logs.records(t, "command stderr")
	if len(recs) != 1 || len(recs[0]["line"].(string)) != maxLine || recs[0]["truncated"] != true {
		t.Fatalf("records: %d", len(recs))
	}
}

func TestExecCommandThatIgnoresStdinSucceeds(t *testing.T) {
	m := testMessage()
	m.Payloads[0] = testPayload("big.bin", "application/octet-stream", strings.Repeat("z", 8<<20))
	if err := newExec(t, ExecConfig{Command: []string{"true"}}).Handle(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

func TestExecConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		c    ExecConfig
		want string
	}{
		{ExecConfig{}, "command: required"},
		{ExecConfig{Command: []string{"gateway-no-such-program"}}, "gateway-no-such-program"},
		{ExecConfig{Command: []string{"/etc/passwd"}}, "permission denied"},
		{ExecConfig{Command: []string{"true"}, Dir: "/nonexistent/dir"}, "not a directory"},
	} {
		_, err := NewExec(tc.c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.c, err, tc.want)
		}
	}
}

// A command that exits 0 but leaves a child holding its output open
// succeeds (its exit status decides) after the pipe grace, and the child
// is killed with its process group.
func TestExecLeftoverChildIsKilledAndExitStatusDecides(t *testing.T) {
	var logs logLines
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	sh := script(t, "cat >/dev/null\nsleep 60 &\necho $! > "+pidFile+"\nexit 0\n")
	e := newExec(t, ExecConfig{Command: []string{sh}, Log: logs.logger()})
	m := testMessage()
	m.Payloads = m.Payloads[:1]
	start := time.Now()
	if err := e.Handle(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	deadline := time.Now().Add(3 * time.Second)
	for pid > 0 && syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("left-over child %d still runs", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(logs.records(t, "command left a process holding its output open; process group killed")) != 1 {
		t.Errorf("no warning logged: %s", logs.buf.String())
	}
}

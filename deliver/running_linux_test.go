//go:build linux

package deliver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// alive says whether pid is a live process (a zombie is not).
func alive(pid int) bool {
	_, err := procStart(pid)
	return err == nil
}

func waitGone(t *testing.T, what string, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		left := 0
		for _, p := range pids {
			if alive(p) {
				left++
			}
		}
		if left == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: processes %v still alive", what, pids)
}

// TestExecRecordsRunningGroup: while a command runs its process group (led
// by its supervisor) is recorded in RunDir with the marker that its
// environment carries; the record goes when the command is done.
func TestExecRecordsRunningGroup(t *testing.T) {
	dir, runDir := t.TempDir(), t.TempDir()
	sh := script(t, `cat > /dev/null
echo "$(cut -d' ' -f5 /proc/$$/stat) $GATEWAY_EXEC_RUN" > "`+dir+`/started"
while [ ! -e "`+dir+`/go" ]; do sleep 0.02; done
`)
	e := newExec(t, ExecConfig{Command: []string{sh}, RunDir: runDir})
	done := make(chan error, 1)
	go func() { done <- e.Handle(context.Background(), testMessage()) }()
	var started []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join(dir, "started"))
		if started = strings.Fields(string(b)); len(started) == 2 {
			break
		}
	}
	if len(started) != 2 {
		t.Fatal("the command did not start")
	}
	rec, err := os.ReadFile(filepath.Join(runDir, started[0]+".run"))
	if err != nil {
		t.Fatalf("no record of the running command: %v", err)
	}
	pid, _ := strconv.Atoi(started[0])
	leader, _ := procStart(pid)
	self, _ := procStart(os.Getpid())
	host, _ := os.Hostname()
	if want := fmt.Sprintf("%s %d %d %d %s\n", hostField(host), os.Getpid(), self, leader, started[1]); string(rec) != want {
		t.Fatalf("record %q, want %q", rec, want)
	}
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o600)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(runDir); len(ents) != 0 {
		t.Fatalf("%d records left after the run", len(ents))
	}
}

// startGroup starts sh with a background sleep (a grandchild) in a process
// group of its own, with env; it returns the leader and the grandchild.
func startGroup(t *testing.T, env ...string) (*exec.Cmd, int) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("/bin/sh", "-c", `sleep 300 & echo $! > "`+dir+`/child"; wait`)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join(dir, "child"))
		if child, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return cmd, child
		}
	}
	t.Fatal("no grandchild")
	return nil, 0
}

// deadGateway is the pid and start time of a process that has exited.
func deadGateway(t *testing.T) (int, uint64) {
	c := exec.Command("/bin/sh", "-c", "exit 0")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return c.Process.Pid, 12345
}

func writeRecord(t *testing.T, dir string, pgid int, host string, owner int, ownerStart, leaderStart uint64, marker string) string {
	t.Helper()
	p := filepath.Join(dir, strconv.Itoa(pgid)+".run")
	if err := os.WriteFile(p, []byte(fmt.Sprintf("%s %d %d %d %s\n", host, owner, ownerStart, leaderStart, marker)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReapLeftovers kills the whole process group of a command whose
// gateway is gone, found by its leader or, once the leader is dead, by
// the marker in a member's environment; it leaves alone the groups of a
// live gateway, of another host, and groups that are not the command's.
func TestReapLeftovers(t *testing.T) {
	host, _ := os.Hostname()
	host = hostField(host)
	deadPid, deadStart := deadGateway(t)
	self, _ := procStart(os.Getpid())

	t.Run("leader alive", func(t *testing.T) {
		dir := t.TempDir()
		leader, child := startGroup(t, envRunMarker+"=m1")
		st, _ := procStart(leader.Process.Pid)
		rec := writeRecord(t, dir, leader.Process.Pid, host, deadPid, deadStart, st, "m1")
		if n, err := ReapLeftovers(dir, nil); n != 1 || err != nil {
			t.Fatalf("killed %d groups: %v", n, err)
		}
		leader.Wait()
		waitGone(t, "reaped group", leader.Process.Pid, child)
		if _, err := os.Stat(rec); !os.IsNotExist(err) {
			t.Fatal("record not removed")
		}
	})
	t.Run("leader dead, marker in a member", func(t *testing.T) {
		dir := t.TempDir()
		leader, child := startGroup(t, envRunMarker+"=m2")
		st, _ := procStart(leader.Process.Pid)
		leader.Process.Kill() // as Pdeathsig does; the grandchild lives on
		leader.Wait()
		if !alive(child) {
			t.Fatal("grandchild died with its parent")
		}
		writeRecord(t, dir, leader.Process.Pid, host, deadPid, deadStart, st, "m2")
		if n, err := ReapLeftovers(dir, nil); n != 1 || err != nil {
			t.Fatalf("killed %d groups: %v", n, err)
		}
		waitGone(t, "reaped grandchild", child)
	})
	t.Run("not ours", func(t *testing.T) {
		for name, rec := range map[string]func(pgid int, st uint64) (string, int, uint64, uint64, string){
			"gateway alive": func(pgid int, st uint64) (string, int, uint64, uint64, string) {
				return host, os.Getpid(), self, st, "m3"
			},
			"other host": func(pgid int, st uint64) (string, int, uint64, uint64, string) {
				return "elsewhere", deadPid, deadStart, st, "m3"
			},
			"reused group id": func(pgid int, st uint64) (string, int, uint64, uint64, string) {
				return host, deadPid, deadStart, st + 1, "other"
			},
		} {
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				leader, child := startGroup(t, envRunMarker+"=m3")
				st, _ := procStart(leader.Process.Pid)
				h, owner, ownerStart, leaderStart, marker := rec(leader.Process.Pid, st)
				writeRecord(t, dir, leader.Process.Pid, h, owner, ownerStart, leaderStart, marker)
				if n, err := ReapLeftovers(dir, nil); n != 0 || err != nil {
					t.Fatalf("killed %d groups: %v", n, err)
				}
				time.Sleep(50 * time.Millisecond)
				if !alive(leader.Process.Pid) || !alive(child) {
					t.Fatal("a group that is not a leftover was killed")
				}
			})
		}
	})
}

// TestExecRunsUnderSupervisor: the command's parent is the supervisor (the
// gateway's binary), the leader of the command's process group, with the
// pipe to the gateway closed in the command; the command's exit status and
// a signal that killed it come through the supervisor unchanged.
func TestExecRunsUnderSupervisor(t *testing.T) {
	dir := t.TempDir()
	sh := script(t, `cat > /dev/null
echo "$PPID $(cut -d' ' -f5 /proc/$$/stat)" > "`+dir+`/ids"
ls /proc/$$/fd > "`+dir+`/fds"
exit ${EXIT:-0}
`)
	e := newExec(t, ExecConfig{Command: []string{sh}, Env: []string{"EXIT"}})
	if err := e.Handle(context.Background(), testMessage()); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "ids"))
	ids := strings.Fields(string(b))
	if len(ids) != 2 || ids[0] != ids[1] {
		t.Fatalf("parent and process group %v: the supervisor does not lead the group", ids)
	}
	fds, _ := os.ReadFile(filepath.Join(dir, "fds"))
	for _, fd := range strings.Fields(string(fds)) {
		if fd == "3" {
			t.Errorf("the command inherited the supervisor's pipe (fd 3): %q", fds)
		}
	}
	t.Setenv("EXIT", "3")
	e = newExec(t, ExecConfig{Command: []string{sh}, Env: []string{"EXIT"}})
	if err := e.Handle(context.Background(), testMessage()); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("err = %v, want exit status 3", err)
	}
	killed := script(t, "cat > /dev/null\nkill -TERM $$\nsleep 5\n")
	e = newExec(t, ExecConfig{Command: []string{killed}})
	if err := e.Handle(context.Background(), testMessage()); err == nil || !strings.Contains(err.Error(), "signal: terminated") {
		t.Fatalf("err = %v, want signal: terminated", err)
	}
}

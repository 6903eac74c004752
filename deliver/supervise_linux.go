//go:build linux

package deliver

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"
)

// On Linux an exec command runs under a small supervisor: the gateway's
// own binary (/proc/self/exe), started with GATEWAY_EXEC_SUPERVISE=1 as
// the leader of the command's process group. It runs the command in that
// group and holds the read end of a pipe whose write end only the gateway
// has: when the gateway dies, by SIGKILL too, the pipe reads end of file
// and the supervisor kills the whole group, the command and whatever it
// started. Pdeathsig on the command covers the supervisor's own death. The
// supervisor exits as the command did (its status, or the same signal), so
// that the handler sees the command's outcome. What survives anyway (the
// supervisor itself SIGKILLed at the same moment) is killed at the next
// start (ReapLeftovers).

// envSupervise makes a process of a binary that links this package the
// supervisor of the command in its arguments.
const envSupervise = "GATEWAY_EXEC_SUPERVISE"

// superviseArg0 is the supervisor's argv[0] (ps shows it).
const superviseArg0 = "gateway-exec-supervisor"

func init() {
	if os.Getenv(envSupervise) == "1" && len(os.Args) > 1 && os.Args[0] == superviseArg0 {
		os.Exit(supervise(os.Args[1:]))
	}
}

// supervised makes cmd, which would run path with args, run it under the
// supervisor. The returned function, called when cmd has been started,
// closes the supervisor's end of the pipe; done, called when cmd is done,
// closes the gateway's.
func supervised(cmd *exec.Cmd, path string, args []string) (started, done func(), err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("supervisor pipe: %w", err)
	}
	cmd.Path = "/proc/self/exe"
	cmd.Args = append([]string{superviseArg0, path}, args...)
	cmd.Env = append(cmd.Env, envSupervise+"=1")
	cmd.ExtraFiles = []*os.File{r} // fd 3
	return func() { r.Close() }, func() { r.Close(); w.Close() }, nil
}

// supervise runs args in this process's group and returns the exit status
// to exit with.
func supervise(args []string) int {
	os.Unsetenv(envSupervise)
	gateway := os.NewFile(3, "gateway")
	syscall.CloseOnExec(3)
	// The command dies with this process (Pdeathsig), whose thread that
	// forks it is held until the command is done.
	runtime.LockOSThread()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "gateway exec: %v\n", err)
		return 127
	}
	go func() {
		// Nobody writes: this returns when the gateway's end is closed,
		// that is when the gateway is gone.
		io.Copy(io.Discard, gateway)
		syscall.Kill(0, syscall.SIGKILL)
	}()
	cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		signal.Reset(ws.Signal())
		syscall.Kill(os.Getpid(), ws.Signal())
		time.Sleep(time.Second)
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

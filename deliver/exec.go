package deliver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/edigateway/gateway/exchange"
)

// ExecConfig configures an exec handler.
type ExecConfig struct {
	// Name names the handler in errors and logs.
	Name string
	// Command is the program and its arguments, run directly (no shell).
	// A program name without a slash is looked up in PATH at start.
	Command []string
	// Dir is the working directory (default: the gateway's).
	Dir string
	// Timeout bounds each run (default 60s); then the command's process
	// group is killed and the message fails.
	Timeout time.Duration
	// Env names variables of the gateway's environment passed on besides
	// the minimal set (PATH, HOME, LANG, LC_ALL, TZ, TMPDIR).
	Env []string
	// MaxOutputBytes bounds what is kept of stdout and what is logged of
	// stderr, each (default 64 KiB); the rest is read and dropped.
	MaxOutputBytes int64
	// RunDir is where each running command's process group is recorded
	// (Linux), so that ReapLeftovers, at the next start, kills what a
	// gateway that died left running (empty: not recorded).
	RunDir string
	Log    *slog.Logger
}

// envRunMarker names the environment variable, set to a random value per
// run when runs are recorded, that marks a command's processes as the
// gateway's (ReapLeftovers).
const envRunMarker = "GATEWAY_EXEC_RUN"

// inherited is the environment every command gets from the gateway's.
var inherited = []string{"PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"}

// Exec runs a program once per payload: the payload on stdin, the metadata
// in GATEWAY_… environment variables (Fields), including
// GATEWAY_IDEMPOTENCY_KEY. Exit status 0 is success; any other status, a
// failure to start or the timeout fails the message, so that the partner
// gets a negative reply and retransmits. Each stderr line is logged
// (truncated to 1 KiB, at most MaxOutputBytes per run); stdout is kept up
// to MaxOutputBytes and logged at debug level.
type Exec struct {
	name, path string
	args       []string
	dir        string
	timeout    time.Duration
	env        []string
	maxOutput  int64
	runDir     string
	log        *slog.Logger
}

// NewExec checks c (the program exists and is executable, the directory
// exists) and builds the handler.
func NewExec(c ExecConfig) (*Exec, error) {
	if len(c.Command) == 0 || c.Command[0] == "" {
		return nil, fmt.Errorf("deliver: exec %s: command: required", c.Name)
	}
	path, err := exec.LookPath(c.Command[0])
	if err != nil {
		return nil, fmt.Errorf("deliver: exec %s: command %q: %w", c.Name, c.Command[0], err)
	}
	if !filepath.IsAbs(path) {
		if path, err = filepath.Abs(path); err != nil {
			return nil, fmt.Errorf("deliver: exec %s: %w", c.Name, err)
		}
	}
	if c.Dir != "" {
		if st, err := os.Stat(c.Dir); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("deliver: exec %s: dir %s is not a directory", c.Name, c.Dir)
		}
	}
	e := &Exec{name: c.Name, path: path, args: c.Command[1:], dir: c.Dir, timeout: c.Timeout, maxOutput: c.MaxOutputBytes, runDir: c.RunDir, log: c.Log}
	if e.timeout <= 0 {
		e.timeout = 60 * time.Second
	}
	if e.maxOutput <= 0 {
		e.maxOutput = 64 << 10
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	for _, k := range append(append([]string(nil), inherited...), c.Env...) {
		if v, ok := os.LookupEnv(k); ok {
			e.env = append(e.env, k+"="+v)
		}
	}
	return e, nil
}

// Handle implements exchange.Handler: one run per payload, in order; the
// first failure fails the message.
func (e *Exec) Handle(ctx context.Context, m *exchange.Message) error {
	for i := range m.Payloads {
		if err := e.run(ctx, m, i); err != nil {
			return fmt.Errorf("deliver: exec %s: payload %d of %d: %w", e.name, i+1, len(m.Payloads), err)
		}
	}
	return nil
}

func (e *Exec) run(ctx context.Context, m *exchange.Message, i int) error {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	stdin, err := m.Payloads[i].Open()
	if err != nil {
		return fmt.Errorf("open payload: %w", err)
	}
	defer stdin.Close()
	lg := e.log.With("handler", e.name, "partner", m.Partner, "message_id", m.MessageID, "payload", i+1)
	cmd := exec.CommandContext(ctx, e.path, e.args...)
	cmd.Dir = e.dir
	cmd.Env = append([]string(nil), e.env...)
	for _, f := range Fields(m, i) {
		cmd.Env = append(cmd.Env, f.Env+"="+f.Value)
	}
	marker := ""
	if e.runDir != "" {
		if marker = newRunMarker(); marker != "" {
			cmd.Env = append(cmd.Env, envRunMarker+"="+marker)
		}
	}
	cmd.Stdin = stdin
	stdout := &capped{max: e.maxOutput}
	stderr := &lineLog{log: lg, budget: e.maxOutput}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	setProcessGroup(cmd)
	supervisorStarted, supervisorDone := superviseCommand(cmd, e.path, e.args, lg)
	defer supervisorDone()
	// Pipes a left-over grandchild keeps open are closed after this.
	cmd.WaitDelay = 2 * time.Second
	start := time.Now()
	// Pdeathsig (Linux, when the command runs without its supervisor)
	// fires when the thread that forked the command exits, not the
	// process: this goroutine keeps its thread, which the runtime then
	// never ends, until the command is done.
	runtime.LockOSThread()
	err = cmd.Start()
	if err == nil {
		supervisorStarted()
		rec := recordRun(e.runDir, cmd.Process.Pid, marker, lg)
		err = cmd.Wait()
		rec.done()
	}
	runtime.UnlockOSThread()
	stderr.flush()
	if stdout.total > 0 {
		lg.Debug("command stdout", "stdout", printable(stdout.buf, 1024, stdout.total))
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		// The command exited, but something it started still holds its
		// output: the exit status decides, the rest of its group goes.
		killProcessGroup(cmd)
		lg.Warn("command left a process holding its output open; process group killed", "exit", cmd.ProcessState.String())
		if cmd.ProcessState.Success() {
			return nil
		}
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s killed after timeout %s: %w", e.path, e.timeout, ctx.Err())
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s killed: %w", e.path, ctx.Err())
	}
	var xe *exec.ExitError
	if errors.As(err, &xe) {
		return fmt.Errorf("%s: %s after %s; stderr: %s", e.path, xe.ProcessState, time.Since(start).Round(time.Millisecond),
			printable(stderr.head, 512, stderr.total))
	}
	return fmt.Errorf("%s: %w", e.path, err)
}

// capped keeps the first max bytes written and counts the rest.
type capped struct {
	max   int64
	buf   []byte
	total int64
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - int64(len(c.buf)); room > 0 {
		c.buf = append(c.buf, p[:min(int64(len(p)), room)]...)
	}
	c.total += int64(len(p))
	return len(p), nil
}

// maxLine bounds one logged stderr line.
const maxLine = 1024

// lineLog logs each stderr line (cut at maxLine) while the budget lasts,
// and keeps the first 512 bytes for the error.
type lineLog struct {
	log     *slog.Logger
	budget  int64
	line    []byte
	cut     bool
	head    []byte
	total   int64
	dropped int64
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.total += int64(len(p))
	if room := 512 - len(l.head); room > 0 {
		l.head = append(l.head, p[:min(len(p), room)]...)
	}
	for _, b := range p {
		if b == '\n' {
			l.emit()
			continue
		}
		if len(l.line) < maxLine {
			l.line = append(l.line, b)
		} else {
			l.cut = true
		}
	}
	return len(p), nil
}

func (l *lineLog) emit() {
	n := int64(len(l.line)) + 1
	if l.budget >= n {
		l.budget -= n
		attrs := []any{"line", Escape(string(l.line))}
		if l.cut {
			attrs = append(attrs, "truncated", true)
		}
		l.log.Warn("command stderr", attrs...)
	} else {
		l.dropped += n
	}
	l.line, l.cut = l.line[:0], false
}

func (l *lineLog) flush() {
	if len(l.line) > 0 || l.cut {
		l.emit()
	}
	if l.dropped > 0 {
		l.log.Warn("command stderr over the output limit; rest not logged", "dropped_bytes", l.dropped)
	}
}

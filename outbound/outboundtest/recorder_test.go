package outboundtest_test

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/edigateway/gateway/outbound/outboundtest"
)

// recorder is a outboundtest.T that records which subtests fail instead of
// failing the real test. It borrows the real test's TempDir, Logf and
// Context, and runs every subtest in its own goroutine like package testing:
// FailNow ends the subtest's goroutine, Parallel lets the parent go on and
// the parent waits for its parallel children before it ends.
type recorder struct {
	testing.TB // the real test, for TempDir, Logf, Context, Helper
	name       string
	results    *results
	parent     *recorder

	mu       sync.Mutex
	failed   bool
	skipped  bool
	cleanups []func()
	children sync.WaitGroup // parallel children
	parallel chan struct{}
	isPar    bool
}

type results struct {
	skip   map[string]bool // subtest paths not to run
	mu     sync.Mutex
	failed map[string][]string // subtest path → messages
	passed map[string]bool
}

func record(tb testing.TB, skip []string, f func(t outboundtest.T)) *results {
	res := &results{failed: map[string][]string{}, passed: map[string]bool{}, skip: map[string]bool{}}
	for _, name := range skip {
		res.skip[name] = true
	}
	root := &recorder{TB: tb, results: res}
	done := make(chan struct{})
	go root.run(f, done)
	<-done
	return res
}

func (r *recorder) Name() string { return r.name }

func (r *recorder) log(msg string) {
	r.results.mu.Lock()
	defer r.results.mu.Unlock()
	r.results.failed[r.name] = append(r.results.failed[r.name], msg)
}

func (r *recorder) Fail() {
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
	if r.parent != nil {
		r.parent.Fail()
	}
}

func (r *recorder) Failed() bool   { r.mu.Lock(); defer r.mu.Unlock(); return r.failed }
func (r *recorder) FailNow()       { r.Fail(); runtime.Goexit() }
func (r *recorder) Error(a ...any) { r.log(fmt.Sprint(a...)); r.Fail() }
func (r *recorder) Errorf(format string, a ...any) {
	r.log(fmt.Sprintf(format, a...))
	r.Fail()
}
func (r *recorder) Fatal(a ...any) { r.log(fmt.Sprint(a...)); r.FailNow() }
func (r *recorder) Fatalf(format string, a ...any) {
	r.log(fmt.Sprintf(format, a...))
	r.FailNow()
}
func (r *recorder) SkipNow()                        { r.mu.Lock(); r.skipped = true; r.mu.Unlock(); runtime.Goexit() }
func (r *recorder) Skip(a ...any)                   { r.SkipNow() }
func (r *recorder) Skipf(format string, a ...any)   { r.SkipNow() }
func (r *recorder) Skipped() bool                   { r.mu.Lock(); defer r.mu.Unlock(); return r.skipped }
func (r *recorder) Setenv(key, value string)        { panic("recorder: Setenv not supported") }
func (r *recorder) Chdir(dir string)                { panic("recorder: Chdir not supported") }
func (r *recorder) Cleanup(f func())                { r.mu.Lock(); r.cleanups = append(r.cleanups, f); r.mu.Unlock() }
func (r *recorder) Helper()                         {}
func (r *recorder) Logf(format string, args ...any) {}
func (r *recorder) Log(args ...any)                 {}

func (r *recorder) Parallel() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.isPar || r.parent == nil {
		return
	}
	r.isPar = true
	r.parent.children.Add(1)
	close(r.parallel)
}

func (r *recorder) Run(name string, f func(t outboundtest.T)) bool {
	path := name
	if r.name != "" {
		path = r.name + "/" + name
	}
	if r.results.skip[path] {
		return true
	}
	c := &recorder{TB: r.TB, name: path, results: r.results, parent: r, parallel: make(chan struct{})}
	done := make(chan struct{})
	go c.run(f, done)
	select {
	case <-done:
		return !c.Failed()
	case <-c.parallel:
		return true
	}
}

// run runs f as the body of r in the calling goroutine, which FailNow may
// end, then finishes r and closes done.
func (r *recorder) run(f func(t outboundtest.T), done chan struct{}) {
	defer close(done)
	defer r.finish()
	defer func() {
		if p := recover(); p != nil {
			r.log(fmt.Sprintf("panic: %v", p))
			r.Fail()
		}
	}()
	f(r)
}

// finish waits for parallel children, runs cleanups and records the result.
func (r *recorder) finish() {
	r.children.Wait()
	r.mu.Lock()
	cleanups := r.cleanups
	r.cleanups = nil
	r.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	if !r.Failed() && r.name != "" {
		r.results.mu.Lock()
		r.results.passed[r.name] = true
		r.results.mu.Unlock()
	}
	r.mu.Lock()
	par := r.isPar
	r.mu.Unlock()
	if par {
		r.parent.children.Done()
	}
}

// failing returns the subtests that reported a failure themselves (not
// only through a failed child), sorted.
func (res *results) failing() []string {
	res.mu.Lock()
	defer res.mu.Unlock()
	var out []string
	for name := range res.failed {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

func (res *results) messages(name string) string {
	res.mu.Lock()
	defer res.mu.Unlock()
	return strings.Join(res.failed[name], "; ")
}

func (res *results) didPass(name string) bool {
	res.mu.Lock()
	defer res.mu.Unlock()
	return res.passed[name]
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/inbox"
	"github.com/edigateway/gateway/internal/envelope"
	"github.com/edigateway/gateway/server"
)

// demoDir is the tests' fixture, testdata/fixture (a copy of the demo).
func demoDir(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "fixture")
}

// demoGateway is the gateway as `serve` builds it from the demo
// configuration, on a temporary SQLite store and inbox, behind an HTTP
// test server. It returns the server's base URL, the inbox and the server.
func demoGateway(t *testing.T) (string, string, *server.Server) {
	base, inboxDir, s, _ := demoGatewayAdmin(t)
	return base, inboxDir, s
}

// demoGatewayAdmin is demoGateway with its admin listener's base URL.
func demoGatewayAdmin(t *testing.T) (string, string, *server.Server, string) {
	t.Helper()
	cfg, err := config.Load(filepath.Join(demoDir(t), "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg.Store = "sqlite:" + filepath.Join(dir, "gw.db")
	cfg.Handler.Inbox = filepath.Join(dir, "inbox")
	cfg.Audit.File = filepath.Join(dir, "audit.jsonl")
	cfg.SpoolDir = dir
	s, err := server.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	admin := httptest.NewServer(s.AdminHandler())
	t.Cleanup(admin.Close)
	return srv.URL, cfg.Handler.Inbox, s, admin.URL
}

func demoFlags(t testing.TB) []string {
	d := demoDir(t)
	return []string{
		"-key", filepath.Join(d, "keys", "demo-partner.key"), "-cert", filepath.Join(d, "partners", "demo-partner.pem"),
		"-gateway-cert", filepath.Join(d, "keys", "gateway.pem"), "-op-key", filepath.Join(d, "keys", "gateway.key"),
		"-op-time", "100ms", "-timeout", "2m",
	}
}

var summaryLine = regexp.MustCompile(`^gateway-load (as2|as4): messages=(\d+) unique=(\d+) duplicates=(\d+) elapsed=\d+\.\d{3}s ` +
	`msgs/s=(\d+\.\d) p50=\d+\.\dms p95=\d+\.\dms p99=\d+\.\dms failures=(\d+) duplicates_answered=(\d+)/(\d+) ` +
	`rsa2048_ops/s=(\d+\.\d) sign_goroutines=(\d+) bound_msgs/s=(\d+\.\d) ratio=(\d+\.\d{3})` +
	` rsa_cpu_ms/op=(\d+\.\d{3})(?: gateway_cpu_ms/msg=(\d+\.\d{3}) non_rsa_cpu_ms/msg=(-?\d+\.\d{3}))?` +
	`(?: load_cpu_ms/msg=(\d+\.\d{3})(?: ceiling_ratio=(\d+\.\d{3}))?(?: cpu_bound_ratio=(\d+\.\d{3}))?)?\n$`)

// TestLoadAgainstDemoGateway runs the tool against the demo gateway for
// both protocols, with a quarter of the messages resent: every message and
// every retransmission is answered correctly, the summary line has its
// format and consistent numbers, the handler ran once per message, and the
// ledger saw each interchange once.
func TestLoadAgainstDemoGateway(t *testing.T) {
	for _, protocol := range []string{"as2", "as4"} {
		t.Run(protocol, func(t *testing.T) {
			base, inboxDir, s, admin := demoGatewayAdmin(t)
			audit := filepath.Join(filepath.Dir(inboxDir), "audit.jsonl")
			var out, errb bytes.Buffer
			profile := filepath.Join(t.TempDir(), "load.cpu.pprof")
			args := append(demoFlags(t), "-protocol", protocol, "-url", base+"/"+protocol, "-metrics", admin+"/metrics",
				"-n", "16", "-c", "4", "-size", "2048", "-duplicates", "0.25", "-cpuprofile", profile)
			if code := run(args, &out, &errb); code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
			}
			m := summaryLine.FindStringSubmatch(out.String())
			if m == nil {
				t.Fatalf("summary line format:\n%s", out.String())
			}
			want := map[int]string{1: protocol, 2: "20", 3: "16", 4: "4", 6: "0", 7: "4", 8: "4"}
			for i, w := range want {
				if m[i] != w {
					t.Errorf("summary field %d = %q, want %q\n%s", i, m[i], w, out.String())
				}
			}
			msgs, _ := strconv.ParseFloat(m[5], 64)
			ops, _ := strconv.ParseFloat(m[9], 64)
			bound, _ := strconv.ParseFloat(m[11], 64)
			ratio, _ := strconv.ParseFloat(m[12], 64)
			// msgs/s and ops/s are printed rounded: allow for it.
			if msgs <= 0 || ops <= 0 || abs(ratio-msgs/(ops/2)) > 0.001+0.01*ratio || abs(bound-ops/2) > 0.1 {
				t.Errorf("ratio %s is not msgs/s ÷ (ops/s ÷ 2) = %s ÷ (%s ÷ 2), or bound %s is not ops/s ÷ 2", m[12], m[5], m[9], m[11])
			}
			// The CPU figures: an RSA-2048 signature costs this tool
			// some CPU; the gateway spends at least its two private-key
			// operations' worth per message (it runs in this process, so
			// its counter also holds the tool's own work); the rest is
			// the difference.
			rsaCPU, _ := strconv.ParseFloat(m[13], 64)
			gwCPU, _ := strconv.ParseFloat(m[14], 64)
			nonRSA, _ := strconv.ParseFloat(m[15], 64)
			if rsaCPU <= 0 || gwCPU < rsaCPU || abs(nonRSA-(gwCPU-2*rsaCPU)) > 0.002 {
				t.Errorf("CPU figures rsa %s, gateway %s, non-RSA %s", m[13], m[14], m[15])
			}
			// The tool's own CPU (here it counts the in-process gateway
			// too) and what follows from it: the ceiling 2r ÷ (2r + l)
			// and the CPU-bound ratio 2r ÷ (g + l), from the printed
			// (rounded) figures.
			loadCPU, _ := strconv.ParseFloat(m[16], 64)
			ceiling, _ := strconv.ParseFloat(m[17], 64)
			cpuBound, _ := strconv.ParseFloat(m[18], 64)
			if loadCPU <= 0 || m[17] == "" || m[18] == "" {
				t.Errorf("load tool CPU figures missing: %q", out.String())
			} else if abs(ceiling-2*rsaCPU/(2*rsaCPU+loadCPU)) > 0.002 || abs(cpuBound-2*rsaCPU/(gwCPU+loadCPU)) > 0.002 || ceiling > 1 {
				t.Errorf("ceiling %s is not 2r÷(2r+l), or cpu_bound_ratio %s is not 2r÷(g+l), with r %s, l %s, g %s", m[17], m[18], m[13], m[16], m[14])
			}
			if p, err := os.ReadFile(profile); err != nil || len(p) < 2 || p[0] != 0x1f || p[1] != 0x8b {
				t.Errorf("-cpuprofile wrote no gzipped profile: %d bytes, %v", len(p), err)
			}
			if m[10] != strconv.Itoa(runtime.GOMAXPROCS(0)) {
				t.Errorf("the bound was measured on %s goroutines, want GOMAXPROCS = %d", m[10], runtime.GOMAXPROCS(0))
			}
			if !strings.Contains(errb.String(), "built 16 "+protocol+" messages of 2048 payload bytes") {
				t.Errorf("progress: %s", errb.String())
			}
			// The gateway's audit trail: 16 new messages holding 16 new
			// interchanges, each handled once, and 4 transport duplicates.
			decisions := map[string]int{}
			handled := 0
			for _, line := range strings.Split(strings.TrimSpace(readFile(t, audit)), "\n") {
				var r struct{ Step, Decision string }
				if err := json.Unmarshal([]byte(line), &r); err != nil {
					t.Fatal(err)
				}
				switch r.Step {
				case "decision":
					decisions[r.Decision]++
				case "handler":
					handled++
				}
			}
			if decisions["new"] != 16 || decisions["new-interchange"] != 16 || decisions["duplicate"] != 4 || len(decisions) != 3 || handled != 16 {
				t.Errorf("audit: decisions %v, %d handler runs", decisions, handled)
			}
			files, err := inbox.Payloads(filepath.Join(inboxDir, "demo"))
			if err != nil || len(files) != 16 {
				t.Fatalf("inbox holds %d files (%v), want 16", len(files), err)
			}
			for _, f := range files {
				b, err := os.ReadFile(filepath.Join(inboxDir, "demo", f))
				if err != nil {
					t.Fatal(err)
				}
				ic, err := envelope.Extract(b)
				if err != nil || len(b) != 2048 {
					t.Fatalf("%s: %d bytes, %v", f, len(b), err)
				}
				recs, err := s.Backend.(dedup.Ledger).FindInterchanges(context.Background(), dedup.InterchangeQuery{Reference: ic.Reference})
				if err != nil || len(recs) != 1 || recs[0].Retries != 0 {
					t.Fatalf("ledger for %s: %v %+v", ic.Reference, err, recs)
				}
			}
		})
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// TestLoadCountsFailures encrypts for and expects answers from the wrong
// certificate: the gateway cannot decrypt, its MDNs do not verify, every
// message is a failure and the exit status is 1 after the summary.
func TestLoadCountsFailures(t *testing.T) {
	base, _, _, admin := demoGatewayAdmin(t)
	d := demoDir(t)
	var out, errb bytes.Buffer
	args := append(demoFlags(t), "-url", base+"/as2", "-metrics", admin+"/metrics", "-n", "3", "-c", "2", "-size", "500",
		"-gateway-cert", filepath.Join(d, "partners", "demo-partner.pem"))
	if code := run(args, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out.String(), errb.String())
	}
	// (A few failing messages may cost the gateway less CPU than its
	// counter's 10 ms resolution: the line then has no gateway CPU fields,
	// which the summary line allows; TestLoadAgainstDemoGateway requires
	// them.)
	m := summaryLine.FindStringSubmatch(out.String())
	if m == nil || m[6] != "3" {
		t.Fatalf("summary:\n%s", out.String())
	}
	if !strings.Contains(errb.String(), "gateway-load: message 0 (first): ") || !strings.Contains(errb.String(), "some messages failed") {
		t.Fatalf("stderr:\n%s", errb.String())
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-url", "http://192.0.2.1:8080/as2"},
		{"-url", "http://gateway.example/as2"},
		{"-url", "ftp://127.0.0.1/as2"},
		{"-metrics", "http://192.0.2.1:9090/metrics"},
		{"-protocol", "as3"},
		{"-n", "0"},
		{"-n", "2000000"},
		{"-c", "1000"},
		{"-size", "0"},
		{"-n", "1000", "-size", "16000000"},
		{"-duplicates", "1.5"},
		{"-duplicates", "NaN"},
		{"-timeout", "2h"},
		{"-op-time", "0s"},
		{"extra"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 || out.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out.String(), errb.String())
		}
	}
	for _, u := range []string{"http://127.0.0.1:8080/as2", "http://127.9.9.9/as4", "http://[::1]:1/as2", "https://localhost/as2"} {
		if err := checkLoopback(u); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
}

func TestInterchange(t *testing.T) {
	for _, size := range []int{1, 150, 200, 2048, 10240, 10000, 99999} {
		b := interchange("DEMO", "GATEWAY", "LABCDEF0000042", size)
		if len(b) != size && size >= 200 {
			t.Errorf("size %d: %d bytes", size, len(b))
		}
		ic, err := envelope.Extract(b)
		if err != nil {
			t.Fatalf("size %d: %v\n%s", size, err, b)
		}
		if ic.Reference != "LABCDEF0000042" || ic.Sender != "DEMO" || ic.Recipient != "GATEWAY" || ic.Type != "INVOIC" {
			t.Errorf("size %d: %+v", size, ic)
		}
		s := string(b)
		body := s[strings.Index(s, "UNH+"):strings.LastIndex(s, "UNZ+")]
		if !strings.HasSuffix(body, fmt.Sprintf("UNT+%d+1'", strings.Count(body, "'"))) {
			t.Errorf("size %d: UNT does not count the segments: %s", size, body[max(0, len(body)-40):])
		}
	}
	if r := reference("ABC123", 42); r != "LABC1230000042" || len(r) != 14 {
		t.Errorf("reference = %q", r)
	}
}

func TestSchedule(t *testing.T) {
	jobs := schedule(100, 0.1, 8)
	if len(jobs) != 110 {
		t.Fatalf("%d jobs", len(jobs))
	}
	firstAt := map[int]int{}
	again := 0
	for k, j := range jobs {
		if !j.dup {
			if _, seen := firstAt[j.idx]; seen {
				t.Fatalf("message %d scheduled twice as first", j.idx)
			}
			firstAt[j.idx] = k
			continue
		}
		again++
		at, ok := firstAt[j.idx]
		if !ok || k-at < min(8, 99-j.idx) {
			t.Errorf("retransmission of %d at %d, first at %d", j.idx, k, at)
		}
	}
	if len(firstAt) != 100 || again != 10 {
		t.Fatalf("%d first, %d again", len(firstAt), again)
	}
	if n := len(schedule(5, 1, 3)); n != 10 {
		t.Errorf("all resent: %d jobs", n)
	}
	if n := len(schedule(5, 0, 3)); n != 5 {
		t.Errorf("none resent: %d jobs", n)
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for p, want := range map[float64]time.Duration{50: 50 * time.Millisecond, 95: 95 * time.Millisecond, 99: 99 * time.Millisecond, 100: 100 * time.Millisecond} {
		if got := percentile(ds, p); got != want {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
	if percentile(nil, 50) != 0 || percentile([]time.Duration{7}, 99) != 7 {
		t.Error("edge cases")
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("percentile sorted its input")
	}
}

// TestMeasureRateRunsOnEveryWorker: the bound's operations run on all the
// goroutines at once (GOMAXPROCS of them in privateOpRate), and the rate
// is operations per second of wall time over all of them.
func TestMeasureRateRunsOnEveryWorker(t *testing.T) {
	const workers = 4
	var mu sync.Mutex
	running, most := 0, 0
	op := func() error {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	}
	rate, err := measureRate(context.Background(), 200*time.Millisecond, workers, op)
	if err != nil {
		t.Fatal(err)
	}
	if most != workers {
		t.Errorf("at most %d operations ran at once, want %d", most, workers)
	}
	// 4 workers × 1 op per ≥ 5 ms: at most 800/s, and well above one
	// worker's 200/s unless the machine is badly overloaded.
	if rate > 800 || rate < 300 {
		t.Errorf("rate %.0f/s, want about 4 × 200/s", rate)
	}
	if _, err := measureRate(context.Background(), time.Second, 2, func() error { return errors.New("boom") }); err == nil {
		t.Error("a failing operation was not reported")
	}
}

// TestBoundMeasuredBeforeTheLoad: the RSA rate is measured on every core
// while the gateway is idle: it ends before the first message is sent, and
// the gateway received nothing during it.
func TestBoundMeasuredBeforeTheLoad(t *testing.T) {
	base, _, _ := demoGateway(t)
	o, err := parseFlags(append(demoFlags(t), "-url", base+"/as2", "-n", "4", "-c", "2", "-size", "500", "-op-time", "300ms"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s, err := load(context.Background(), o, io.Discard)
	if err != nil || s.failures != 0 {
		t.Fatalf("load: %v, %d failures", err, s.failures)
	}
	if s.opWorkers != runtime.GOMAXPROCS(0) {
		t.Errorf("bound measured on %d goroutines, want %d", s.opWorkers, runtime.GOMAXPROCS(0))
	}
	if d := s.boundEnd.Sub(s.boundStart); d < 300*time.Millisecond {
		t.Errorf("bound measured for %s, want -op-time", d)
	}
	if s.sendStart.Before(s.boundEnd) {
		t.Errorf("the load started at %s, before the bound's measurement ended at %s", s.sendStart, s.boundEnd)
	}
}

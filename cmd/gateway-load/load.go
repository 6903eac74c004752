package main

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/edigateway/gateway/internal/cms"
)

// answer is what the gateway replied to one transmission, once verified.
type answer struct {
	// body is the reply as received (AS4: the receipt, compared byte for
	// byte with a retransmission's).
	body []byte
	// duplicate: the reply says the message was seen before (AS2
	// processed/warning: duplicate-document).
	duplicate bool
}

// driver builds and sends one protocol's messages.
type driver interface {
	// build makes message number i around payload.
	build(i int, payload []byte) (any, error)
	// send posts a built message and verifies the reply; an error is a
	// failure (transport, HTTP status, negative or unverifiable reply).
	send(ctx context.Context, m any) (answer, error)
	// sameReply reports whether a retransmission's reply answers it as the
	// first reply did.
	sameReply(first, again answer) bool
}

// job is one transmission: message idx, first or again.
type job struct {
	idx int
	dup bool
}

// outcome is a job's result.
type outcome struct {
	latency time.Duration
	err     error
}

// summary is the run's result line.
type summary struct {
	protocol              string
	messages, unique      int
	duplicates            int
	elapsed               time.Duration
	p50, p95, p99         time.Duration
	failures              int
	duplicatesAnswered    int
	opBits                int
	opsPerSec, msgsPerSec float64
	// opWorkers goroutines measured opsPerSec from boundStart to boundEnd,
	// before the first message was sent at sendStart.
	opWorkers                       int
	boundStart, boundEnd, sendStart time.Time
	// rsaCPU is this process's CPU time per private-key operation while
	// measuring the bound (0: not measured on this system).
	rsaCPU time.Duration
	// gatewayCPU is the gateway's CPU time during the load (-metrics; 0:
	// not read).
	gatewayCPU time.Duration
	// loadCPU is this process's own CPU time while it sent the messages
	// and verified the replies (0: not measured on this system).
	loadCPU time.Duration
}

// cpuPerMessage is the gateway's CPU time per transmission.
func (s *summary) cpuPerMessage() time.Duration {
	if s.messages == 0 {
		return 0
	}
	return s.gatewayCPU / time.Duration(s.messages)
}

// loadCPUPerMessage is this tool's own CPU time per transmission.
func (s *summary) loadCPUPerMessage() time.Duration {
	if s.messages == 0 {
		return 0
	}
	return s.loadCPU / time.Duration(s.messages)
}

// ceiling is the ratio that a gateway spending nothing beside its two
// private-key operations could reach on this machine with this tool beside
// it: both share the cores the bound was measured on, so the best rate is
// cores ÷ (2 × RSA + load tool) per message against the bound's
// cores ÷ (2 × RSA). 0 when either CPU figure was not measured.
func (s *summary) ceiling() float64 {
	if s.rsaCPU <= 0 || s.loadCPU <= 0 {
		return 0
	}
	return float64(2*s.rsaCPU) / float64(2*s.rsaCPU+s.loadCPUPerMessage())
}

// cpuBoundRatio is the ratio the measured CPU costs allow when every core
// is busy: cores ÷ (gateway + load tool) per message against the bound's
// cores ÷ (2 × RSA). The measured ratio ÷ this is how busy the gateway
// kept the cores. 0 when a CPU figure was not measured.
func (s *summary) cpuBoundRatio() float64 {
	if s.rsaCPU <= 0 || s.loadCPU <= 0 || s.gatewayCPU <= 0 {
		return 0
	}
	return float64(2*s.rsaCPU) / float64(s.cpuPerMessage()+s.loadCPUPerMessage())
}

// bound is the messages per second the RSA work alone allows: two private
// key operations per message (AS2: key transport and MDN signature; AS4:
// key unwrap and receipt signature).
func (s *summary) bound() float64 { return s.opsPerSec / 2 }

func (s *summary) ratio() float64 {
	if s.opsPerSec == 0 {
		return 0
	}
	return s.msgsPerSec / s.bound()
}

// String is the one-line summary (see the package comment).
func (s *summary) String() string {
	return fmt.Sprintf("gateway-load %s: messages=%d unique=%d duplicates=%d elapsed=%.3fs msgs/s=%.1f p50=%s p95=%s p99=%s failures=%d duplicates_answered=%d/%d rsa%d_ops/s=%.1f sign_goroutines=%d bound_msgs/s=%.1f ratio=%.3f",
		s.protocol, s.messages, s.unique, s.duplicates, s.elapsed.Seconds(), s.msgsPerSec,
		ms(s.p50), ms(s.p95), ms(s.p99), s.failures, s.duplicatesAnswered, s.duplicates, s.opBits, s.opsPerSec, s.opWorkers, s.bound(), s.ratio()) +
		s.cpuFields()
}

// cpuFields are the CPU figures of the summary line (see the package
// comment), those that were measured.
func (s *summary) cpuFields() string {
	var b strings.Builder
	if s.rsaCPU > 0 {
		fmt.Fprintf(&b, " rsa_cpu_ms/op=%.3f", msf(s.rsaCPU))
	}
	if s.gatewayCPU > 0 {
		fmt.Fprintf(&b, " gateway_cpu_ms/msg=%.3f", msf(s.cpuPerMessage()))
		if s.rsaCPU > 0 {
			fmt.Fprintf(&b, " non_rsa_cpu_ms/msg=%.3f", msf(s.cpuPerMessage()-2*s.rsaCPU))
		}
	}
	if s.loadCPU > 0 {
		fmt.Fprintf(&b, " load_cpu_ms/msg=%.3f", msf(s.loadCPUPerMessage()))
		if c := s.ceiling(); c > 0 {
			fmt.Fprintf(&b, " ceiling_ratio=%.3f", c)
		}
		if c := s.cpuBoundRatio(); c > 0 {
			fmt.Fprintf(&b, " cpu_bound_ratio=%.3f", c)
		}
	}
	return b.String()
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }

// load runs the whole test: build, measure the RSA rate, send, summarise.
func load(ctx context.Context, o *options, progress io.Writer) (*summary, error) {
	tr := &http.Transport{
		Proxy:               nil, // loopback only: never through a proxy
		MaxIdleConnsPerHost: o.c,
		IdleConnTimeout:     30 * time.Second,
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: o.requestTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var d driver
	var err error
	switch o.protocol {
	case "as2":
		d, err = newAS2Driver(o, hc)
	case "as4":
		d, err = newAS4Driver(o, hc)
	}
	if err != nil {
		return nil, err
	}
	opKey, err := readRSAKey(o.opKeyFile)
	if err != nil {
		return nil, err
	}

	run, err := runID()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	msgs, err := buildAll(ctx, d, o, run)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "gateway-load: built %d %s messages of %d payload bytes in %.1fs (run %s)\n",
		len(msgs), o.protocol, o.size, time.Since(start).Seconds(), run)

	// The bound, measured now: the gateway is idle (nothing sent yet) and
	// the messages are built, so nothing else of this process runs.
	boundStart := time.Now()
	cpu0, cpuOK := processCPU()
	ops, workers, err := privateOpRate(ctx, opKey, o.opTime)
	if err != nil {
		return nil, err
	}
	cpu1, _ := processCPU()
	boundEnd := time.Now()
	var rsaCPU time.Duration
	if n := ops * boundEnd.Sub(boundStart).Seconds(); cpuOK && n >= 1 {
		rsaCPU = time.Duration(float64(cpu1-cpu0) / n)
	}
	fmt.Fprintf(progress, "gateway-load: RSA-%d PKCS#1 v1.5 signatures: %.1f/s on %d goroutines over %.1fs (bound %.1f msgs/s)\n",
		opKey.N.BitLen(), ops, workers, boundEnd.Sub(boundStart).Seconds(), ops/2)
	jobs := schedule(o.n, o.duplicates, o.c)
	var gw0 time.Duration
	if o.metricsURL != "" {
		if gw0, err = gatewayCPU(ctx, hc, o.metricsURL); err != nil {
			return nil, err
		}
	}
	stopProfile, err := startCPUProfile(o.cpuProfile)
	if err != nil {
		return nil, err
	}
	sendStart := time.Now()
	lcpu0, lcpuOK := processCPU()
	outcomes, elapsed := send(ctx, d, msgs, jobs, o.c)
	lcpu1, _ := processCPU()
	if err := stopProfile(); err != nil {
		return nil, err
	}

	s := &summary{protocol: o.protocol, messages: len(jobs), unique: o.n, duplicates: len(jobs) - o.n,
		elapsed: elapsed, opBits: opKey.N.BitLen(), opsPerSec: ops, opWorkers: workers,
		boundStart: boundStart, boundEnd: boundEnd, sendStart: sendStart, rsaCPU: rsaCPU}
	if lcpuOK {
		s.loadCPU = lcpu1 - lcpu0
	}
	if o.metricsURL != "" {
		gw1, err := gatewayCPU(ctx, hc, o.metricsURL)
		if err != nil {
			return nil, err
		}
		s.gatewayCPU = gw1 - gw0
	}
	lat := make([]time.Duration, 0, len(outcomes))
	reported := 0
	for i, oc := range outcomes {
		if oc.latency > 0 { // sent
			lat = append(lat, oc.latency)
		}
		if oc.err != nil {
			s.failures++
			if reported < 5 {
				fmt.Fprintf(progress, "gateway-load: message %d (%s): %v\n", jobs[i].idx, map[bool]string{false: "first", true: "again"}[jobs[i].dup], oc.err)
				reported++
			}
		} else if jobs[i].dup {
			s.duplicatesAnswered++
		}
	}
	if s.failures > reported {
		fmt.Fprintf(progress, "gateway-load: … and %d more failures\n", s.failures-reported)
	}
	s.p50, s.p95, s.p99 = percentile(lat, 50), percentile(lat, 95), percentile(lat, 99)
	if elapsed > 0 {
		s.msgsPerSec = float64(len(jobs)) / elapsed.Seconds()
	}
	return s, nil
}

// startCPUProfile writes a CPU profile of this process to path (nothing
// when path is empty) until the returned function is called.
func startCPUProfile(path string) (func() error, error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("gateway-load: -cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("gateway-load: -cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("gateway-load: -cpuprofile: %w", err)
		}
		return nil
	}, nil
}

// runID is a random base-36 token of six characters that keeps this run's
// interchange references apart from every other run's.
func runID() (string, error) {
	const digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("gateway-load: random: %w", err)
	}
	for i := range b {
		b[i] = digits[int(b[i])%len(digits)]
	}
	return string(b[:]), nil
}

// buildAll builds the n messages on every CPU.
func buildAll(ctx context.Context, d driver, o *options, run string) ([]any, error) {
	msgs := make([]any, o.n)
	workers := min(runtime.GOMAXPROCS(0), o.n)
	next := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				m, err := d.build(i, interchange(o.unbSender, o.unbRecipient, reference(run, i), o.size))
				if err != nil {
					errs <- fmt.Errorf("gateway-load: building message %d: %w", i, err)
					return
				}
				msgs[i] = m
			}
		}()
	}
	var err error
feed:
	for i := range o.n {
		select {
		case next <- i:
		case err = <-errs:
			break feed
		case <-ctx.Done():
			err = fmt.Errorf("gateway-load: building messages: %w", ctx.Err())
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	return msgs, err
}

// schedule lists the transmissions: every message once, in order, and
// round(fraction × n) randomly chosen ones again, each queued c positions
// after its first transmission (so that it is usually answered by then; the
// sender waits for the answer anyway: an overlapping retransmission would
// get 503 in-flight, which is not what this measures).
func schedule(n int, fraction float64, c int) []job {
	d := int(math.Round(fraction * float64(n)))
	again := map[int][]int{} // position → messages resent after it
	for _, i := range mrand.Perm(n)[:d] {
		at := min(i+c, n-1)
		again[at] = append(again[at], i)
	}
	jobs := make([]job, 0, n+d)
	for i := range n {
		jobs = append(jobs, job{idx: i})
		slices.Sort(again[i])
		for _, j := range again[i] {
			jobs = append(jobs, job{idx: j, dup: true})
		}
	}
	return jobs
}

// send runs the jobs on c senders and returns every job's outcome and the
// wall time. Jobs not run before ctx ends fail with its error.
func send(ctx context.Context, d driver, msgs []any, jobs []job, c int) ([]outcome, time.Duration) {
	outcomes := make([]outcome, len(jobs))
	first := make([]answer, len(msgs))
	firstErr := make([]error, len(msgs))
	done := make([]chan struct{}, len(msgs))
	for i := range done {
		done[i] = make(chan struct{})
	}
	queue := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range queue {
				j := jobs[k]
				if j.dup {
					select {
					case <-done[j.idx]:
					case <-ctx.Done():
						outcomes[k].err = ctx.Err()
						continue
					}
				}
				t0 := time.Now()
				a, err := d.send(ctx, msgs[j.idx])
				outcomes[k].latency = time.Since(t0)
				switch {
				case !j.dup:
					if err == nil && a.duplicate {
						err = fmt.Errorf("first transmission answered as a duplicate")
					}
					first[j.idx], firstErr[j.idx] = a, err
					close(done[j.idx])
				case err == nil && firstErr[j.idx] != nil:
					err = fmt.Errorf("retransmission answered, the first transmission was not: %w", firstErr[j.idx])
				case err == nil && !d.sameReply(first[j.idx], a):
					err = fmt.Errorf("retransmission answered differently from the first transmission")
				}
				outcomes[k].err = err
			}
		}()
	}
	for k := range jobs {
		if ctx.Err() != nil {
			outcomes[k].err = ctx.Err()
			if !jobs[k].dup {
				close(done[jobs[k].idx])
				firstErr[jobs[k].idx] = ctx.Err()
			}
			continue
		}
		queue <- k
	}
	close(queue)
	wg.Wait()
	return outcomes, time.Since(start)
}

// percentile is the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[max(rank, 1)-1]
}

// privateOpRate is the machine's rate of RSA private-key operations with
// key: PKCS#1 v1.5 SHA-256 signatures on GOMAXPROCS goroutines (every core)
// for about d. load calls it before the first message is sent, while the
// gateway is idle, so that the load does not depress the bound.
func privateOpRate(ctx context.Context, key *rsa.PrivateKey, d time.Duration) (float64, int, error) {
	digest := sha256.Sum256([]byte("gateway-load"))
	workers := runtime.GOMAXPROCS(0)
	rate, err := measureRate(ctx, d, workers, func() error {
		_, err := rsa.SignPKCS1v15(nil, key, crypto.SHA256, digest[:])
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("gateway-load: measuring RSA: %w", err)
	}
	return rate, workers, nil
}

// measureRate runs op on workers goroutines until d has passed and returns
// the operations completed per second of wall time.
func measureRate(ctx context.Context, d time.Duration, workers int, op func() error) (float64, error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int
		first error
	)
	start := time.Now()
	deadline := start.Add(d)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			var err error
			for time.Now().Before(deadline) {
				if err = ctx.Err(); err != nil {
					break
				}
				if err = op(); err != nil {
					break
				}
				n++
			}
			mu.Lock()
			total += n
			if first == nil {
				first = err
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if first != nil {
		return 0, first
	}
	return float64(total) / elapsed.Seconds(), nil
}

// gatewayCPU reads the gateway's CPU time (user + system) from its admin
// /metrics: the Prometheus process collector's process_cpu_seconds_total.
func gatewayCPU(ctx context.Context, hc *http.Client, metricsURL string) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err != nil {
		return 0, fmt.Errorf("gateway-load: -metrics: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("gateway-load: -metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("gateway-load: -metrics %s: HTTP %s", metricsURL, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, fmt.Errorf("gateway-load: -metrics: %w", err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "process_cpu_seconds_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, fmt.Errorf("gateway-load: -metrics: process_cpu_seconds_total %q: %w", v, err)
			}
			return time.Duration(f * float64(time.Second)), nil
		}
	}
	return 0, fmt.Errorf("gateway-load: -metrics %s has no process_cpu_seconds_total", metricsURL)
}

func readRSAKey(path string) (*rsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gateway-load: -op-key: %w", err)
	}
	k, err := cms.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("gateway-load: -op-key %s: %w", path, err)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("gateway-load: -op-key %s is a %T, not an RSA key", path, k)
	}
	return rk, nil
}

// reference is message i's UNB 0020 interchange control reference: the
// run's token and the message number, 14 characters (the element's maximum).
func reference(run string, i int) string {
	return fmt.Sprintf("L%s%07d", run, i%10_000_000)
}

// interchange is an EDIFACT INVOIC interchange of exactly size bytes (or
// the envelope's length, when size is smaller) with control reference ref.
func interchange(sender, recipient, ref string, size int) []byte {
	head := "UNA:+.? 'UNB+UNOA:2+" + sender + ":14+" + recipient + ":14+240315:0930+" + ref + "'UNH+1+INVOIC:D:96A:UN'BGM+380+" + ref + "+9'"
	const line = "LIN+1++9783898307529:EN'QTY+47:5'PRI+AAA:27.5'"
	const ftx = "FTX+AAI+++'"
	tail := func(segments int) string { return fmt.Sprintf("UNT+%d+1'UNZ+1+%s'", segments, ref) }
	var sb strings.Builder
	sb.WriteString(head)
	segments := 2 // UNH, BGM
	for sb.Len()+len(line)+len(ftx)+len(tail(segments+5)) <= size {
		sb.WriteString(line)
		segments += 3
	}
	if fill := size - sb.Len() - len(ftx) - len(tail(segments+2)); fill >= 0 {
		sb.WriteString(ftx[:len(ftx)-1] + strings.Repeat("X", fill) + "'")
		segments++
	}
	sb.WriteString(tail(segments + 1)) // + UNT itself
	return []byte(sb.String())
}

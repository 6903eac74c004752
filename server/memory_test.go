package server

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/as4/endpoint"
	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/heaptest"
	"github.com/edigateway/gateway/internal/testbomb"
)

// The memory test runs the real HTTP endpoints and measures, for each
// hostile request (or four at once), the growth of the heap (runtime/metrics,
// sampled) and of the resident set (VmHWM after resetting it through
// /proc/self/clear_refs; sampled VmRSS where that is not permitted) over the
// idle process. GATEWAY_MEMREPORT=1 prints the figures as a table
// (scripts/memreport.sh).

const maxGrowth = 64 << 20

type probe struct {
	idleHeap, idleRSS uint64
	peakHeap, peakRSS uint64
	hwm               bool
	stop, done        chan struct{}
}

var heapSample = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}}

func heapNow() uint64 {
	metrics.Read(heapSample)
	return heapSample[0].Value.Uint64() + heapSample[1].Value.Uint64()
}

// procStatus returns a kB field of /proc/self/status in bytes.
func procStatus(field string) uint64 { return heaptest.ProcStatus(0, field) }

func startProbe() *probe {
	runtime.GC()
	debug.FreeOSMemory()
	p := &probe{stop: make(chan struct{}), done: make(chan struct{})}
	p.idleHeap, p.idleRSS = heapNow(), procStatus("VmRSS")
	p.peakHeap, p.peakRSS = p.idleHeap, p.idleRSS
	p.hwm = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	go func() {
		defer close(p.done)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			p.peakHeap = max(p.peakHeap, heapNow())
			p.peakRSS = max(p.peakRSS, procStatus("VmRSS"))
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

// end returns the peak growth of heap and RSS over idle.
func (p *probe) end() (heap, rss uint64) {
	close(p.stop)
	<-p.done
	if p.hwm {
		p.peakRSS = max(p.peakRSS, procStatus("VmHWM"))
	}
	sub := func(a, b uint64) uint64 {
		if a < b {
			return 0
		}
		return a - b
	}
	return sub(p.peakHeap, p.idleHeap), sub(p.peakRSS, p.idleRSS)
}

type repeat byte

func (r repeat) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// memoryServer serves the demo configuration on loopback; tune adjusts it.
func memoryServer(t *testing.T, tune func(c *config.Config)) string {
	t.Helper()
	cfg := demoConfig(t)
	cfg.Partners = plainDemoPartners(t)
	cfg.SpoolDir = t.TempDir()
	if tune != nil {
		tune(cfg)
	}
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return serveGateway(t, s)
}

// as2Post sends a request from the demo partner (AS2-From DEMO) and returns
// the status and the body of the answer; a connection the server closed
// while the body was still being sent counts as status 0.
func as2Post(url, id, contentType string, body io.Reader, length int64) (int, string) {
	req, _ := http.NewRequest(http.MethodPost, url+"/as2", body)
	req.ContentLength = length
	for k, v := range map[string]string{"AS2-From": "DEMO", "AS2-To": "GATEWAY", "AS2-Version": "1.2",
		"Message-Id": "<" + id + "@demo>", "Disposition-Notification-To": "mdn@demo", "Content-Type": contentType} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

func demoAS4Client(t testing.TB) *client.Client {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	demo := filepath.Join(filepath.Dir(file), "..", "testdata", "fixture")
	certPEM, err := os.ReadFile(filepath.Join(demo, "partners", "demo-partner.pem"))
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(demo, "keys", "demo-partner.key"))
	if err != nil {
		t.Fatal(err)
	}
	kp, err := endpoint.ParseKeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &client.Client{Signer: kp.Key.(crypto.Signer), Certificate: kp.Cert, Host: "demo.test"}
}

// parallel runs f(0..n-1) at once and waits.
func parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); f(i) }()
	}
	wg.Wait()
}

// TestMemoryBoundedUnderHostileInput: every bomb and every oversized
// unauthenticated body is refused with heap and RSS growth ≤ 64 MiB.
func TestMemoryBoundedUnderHostileInput(t *testing.T) {
	report := os.Getenv("GATEWAY_MEMREPORT") != ""
	var rows []string
	measure := func(name string, run func() error) {
		t.Helper()
		measured(t, &rows, name, run, true)
	}
	defer func() {
		if report {
			how := "VmHWM after clear_refs"
			if os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) != nil {
				how = "sampled VmRSS"
			}
			fmt.Println("peak growth over idle (heap: runtime/metrics, sampled; RSS: " + how + ")")
			for _, r := range rows {
				fmt.Println(r)
			}
		}
	}()

	// Bombs, with the default limits.
	url := memoryServer(t, nil)
	bomb := testbomb.NestedAS2(4 << 30)
	as2Bomb := func(id string) error {
		st, body := as2Post(url, id, testbomb.ContentType, bytes.NewReader(bomb), int64(len(bomb)))
		if st != http.StatusOK || !strings.Contains(body, "decompression-failed") {
			return fmt.Errorf("HTTP %d %.200q, want an MDN with decompression-failed", st, body)
		}
		return nil
	}
	measure(fmt.Sprintf("AS2 nested zlib bomb (%d bytes, 4 GiB)", len(bomb)), func() error { return as2Bomb("bomb-1") })
	measure("AS2 nested zlib bomb, four in parallel", func() error {
		errs := make([]error, 4)
		parallel(4, func(i int) { errs[i] = as2Bomb(fmt.Sprintf("bomb-p%d", i)) })
		return firstErr(errs)
	})
	c := demoAS4Client(t)
	gz := testbomb.Gzip(1 << 30)
	outs := make([]*client.Outgoing, 4)
	for i := range outs {
		out, err := c.Build(demoAS4Message(fmt.Sprintf("as4-bomb-%d@demo.test", i), gz))
		if err != nil {
			t.Fatal(err)
		}
		outs[i] = out
	}
	gz = nil
	as4Send := func(out *client.Outgoing) error {
		resp, err := http.Post(url+"/as4", out.ContentType, bytes.NewReader(out.Body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(b), "EBMS:0303") {
			return fmt.Errorf("HTTP %d %.300q, want EBMS:0303", resp.StatusCode, b)
		}
		return nil
	}
	measure(fmt.Sprintf("AS4 gzip bomb (%d bytes, 1 GiB)", len(outs[0].Body)), func() error { return as4Send(outs[0]) })
	measure("AS4 gzip bomb, four in parallel", func() error {
		outs[0], _ = c.Build(demoAS4Message("as4-bomb-again@demo.test", testbomb.Gzip(1<<30)))
		errs := make([]error, 4)
		parallel(4, func(i int) { errs[i] = as4Send(outs[i]) })
		return firstErr(errs)
	})

	// The AS4 envelope with a 90 MiB text node (742 MB, 5 s before):
	// refused while the envelope part is read, before parsing.
	measure("AS4 SOAP envelope with a 90 MiB text node", func() error {
		const n = 90 << 20
		head := `<S:Envelope xmlns:S="http://www.w3.org/2003/05/soap-envelope"><S:Header/><S:Body><p>`
		tail := `</p></S:Body></S:Envelope>`
		body := io.MultiReader(strings.NewReader(head), io.LimitReader(repeat('a'), n), strings.NewReader(tail))
		req, _ := http.NewRequest(http.MethodPost, url+"/as4", body)
		req.ContentLength = int64(len(head) + n + len(tail))
		req.Header.Set("Content-Type", "application/soap+xml")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil // the server closed the connection after refusing
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(b), "SOAP envelope larger than") {
			return fmt.Errorf("HTTP %d %.300q, want the envelope refused", resp.StatusCode, b)
		}
		return nil
	})

	// Unauthenticated bodies: known AS2-From, junk, under a 64 MiB budget.
	url = memoryServer(t, func(c *config.Config) { c.Limits.MemoryBudget = 64 << 20 })
	const junk = 99 << 20
	for _, chunked := range []bool{false, true} {
		name := "four concurrent 99 MiB junk bodies (Content-Length)"
		length := int64(junk)
		if chunked {
			name, length = "four concurrent 99 MiB junk bodies (chunked)", -1
		}
		measure(name, func() error {
			errs := make([]error, 4)
			parallel(4, func(i int) {
				var body io.Reader = io.LimitReader(repeat('J'), junk)
				if chunked {
					body = struct{ io.Reader }{body}
				}
				st, text := as2Post(url, fmt.Sprintf("junk-%v-%d", chunked, i), "application/pkcs7-mime; smime-type=enveloped-data", body, length)
				switch {
				case st == 0, st == http.StatusRequestEntityTooLarge, st == http.StatusServiceUnavailable:
				case st == http.StatusOK && strings.Contains(text, "was not processed"):
					// Streamed (a fixed reservation) and refused as junk.
				default:
					errs[i] = fmt.Errorf("HTTP %d %.200q, want a negative MDN, 413 or 503", st, text)
				}
			})
			return firstErr(errs)
		})
	}
	// Bodies that are read: one fits the budget, the others get 503.
	measure("four concurrent 10 MiB junk bodies (one admitted)", func() error {
		errs := make([]error, 4)
		parallel(4, func(i int) {
			st, text := as2Post(url, fmt.Sprintf("junk10-%d", i), "application/pkcs7-mime; smime-type=enveloped-data",
				io.LimitReader(repeat('J'), 10<<20), 10<<20)
			if st != http.StatusOK && st != http.StatusServiceUnavailable {
				errs[i] = fmt.Errorf("HTTP %d %.200q, want 200 (negative MDN) or 503", st, text)
			}
		})
		return firstErr(errs)
	})
	if report {
		legitimate(t, &rows)
		// For the record, not asserted: the default 1 GiB budget admits
		// two 99 MiB bodies (2 × 99 MiB × 4 reserved), the others get 503.
		url = memoryServer(t, nil)
		measured(t, &rows, "(default budget) four concurrent 99 MiB junk bodies", func() error {
			parallel(4, func(i int) {
				as2Post(url, fmt.Sprintf("junkdef-%d", i), "application/pkcs7-mime; smime-type=enveloped-data",
					io.LimitReader(repeat('J'), junk), junk)
			})
			return nil
		}, false)
	}
}

// measured runs one scenario between probes, records its figures in rows
// and, when assert is set, fails it over maxGrowth.
func measured(t *testing.T, rows *[]string, name string, run func() error, assert bool) {
	t.Helper()
	p := startProbe()
	start := time.Now()
	err := run()
	took := time.Since(start)
	heap, rss := p.end()
	row := fmt.Sprintf("%-52s heap +%4d MiB  RSS +%4d MiB  %6s", name, heap>>20, rss>>20, took.Round(time.Millisecond))
	*rows = append(*rows, row)
	t.Log(row)
	if err != nil {
		t.Errorf("%s: %v", name, err)
	}
	if assert && (heap > maxGrowth || rss > maxGrowth) {
		t.Errorf("%s: peak growth heap %d MiB, RSS %d MiB, over %d MiB", name, heap>>20, rss>>20, maxGrowth>>20)
	}
}

// legitimate measures, for the record, what a valid 16 MiB message costs
// per body byte on each protocol (the amplification the budget reserves).
func legitimate(t *testing.T, rows *[]string) {
	url := memoryServer(t, nil)
	partner, gw := demoAS2KeyPairs(t)
	payload := make([]byte, 16<<20)
	for i := range payload {
		payload[i] = "0123456789ABCDEF"[(i*7919+i/13)%16]
	}
	c := &as2client.Client{URL: url + "/as2", From: "DEMO", To: "GATEWAY", SignCert: partner.Cert, SignKey: partner.Key, SignDigest: "sha256",
		RecipientCerts: []*x509.Certificate{gw.Cert}, Cipher: "aes256-cbc", MDN: as2client.MDNSync}
	m, err := c.Prepare(payload, "application/edi-consent", "big.edi")
	if err != nil {
		t.Fatal(err)
	}
	measured(t, rows, fmt.Sprintf("(legit) AS2 signed+encrypted, %d MiB body", len(m.Body)>>20), func() error {
		res, err := c.Send(context.Background(), m)
		if err != nil || !res.OK() {
			return fmt.Errorf("%v %+v", err, res)
		}
		return nil
	}, false)
	out, err := demoAS4Client(t).Build(&client.Message{
		MessageID: "legit@demo.test",
		From:      as4.PartyID{Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered", Value: "urn:demo:partner"},
		To:        as4.PartyID{Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered", Value: "urn:demo:gateway"},
		Service:   "urn:demo:invoicing", Action: "Deliver",
		Payloads: []client.Payload{{MimeType: "application/edifact", Data: payload}},
	})
	if err != nil {
		t.Fatal(err)
	}
	measured(t, rows, fmt.Sprintf("(legit) AS4 signed, %d MiB body", len(out.Body)>>20), func() error {
		resp, err := http.Post(url+"/as4", out.ContentType, bytes.NewReader(out.Body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(b), "Receipt") {
			return fmt.Errorf("HTTP %d %.300q", resp.StatusCode, b)
		}
		return nil
	}, false)
}

func demoAS4Message(id string, gz []byte) *client.Message {
	return &client.Message{
		MessageID: id,
		From:      as4.PartyID{Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered", Value: "urn:demo:partner"},
		To:        as4.PartyID{Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered", Value: "urn:demo:gateway"},
		Service:   "urn:demo:invoicing", Action: "Deliver",
		Payloads: []client.Payload{{MimeType: "application/edifact", Data: gz, Compressed: true}},
	}
}

func firstErr(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

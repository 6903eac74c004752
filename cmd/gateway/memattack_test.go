package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/as4/endpoint"
	"github.com/edigateway/gateway/internal/heaptest"
)

// The memory attacks of issue 22 (items 1, 2 and 4), repeated against the
// real binary (`gateway serve` as a child process) with the inputs,
// the counts scaled to a smaller memory budget so that each test takes
// seconds. The gateway's resident set is read from /proc/<pid>/status.

// maxRequestGrowth is the most one unauthenticated request may grow the
// gateway's resident set by.
const maxRequestGrowth = 64 << 20

// attackBudget is limits.memory_budget of these tests.
const attackBudget = 256 << 20

// attackGateway starts the demo gateway (AS2 and AS4, a second AS2 partner
// OTHER) with a memory budget of budget bytes (0: the default, 1 GiB) and
// returns its address and process.
func attackGateway(t *testing.T, budget int64) (string, *exec.Cmd) {
	t.Helper()
	addr, _, cmd := attackGatewayAdmin(t, budget)
	return addr, cmd
}

// attackGatewayAdmin is attackGateway that also returns the admin
// listener's address.
func attackGatewayAdmin(t *testing.T, budget int64) (addr, admin string, cmd *exec.Cmd) {
	t.Helper()
	demo := filepath.Dir(demoConfig(t))
	dir := t.TempDir()
	parts := filepath.Join(dir, "partners")
	if err := os.MkdirAll(parts, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"demo.yaml", "demo-partner.pem"} {
		b, err := os.ReadFile(filepath.Join(demo, "partners", f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(parts, f), b, 0o600)
	}
	os.WriteFile(filepath.Join(parts, "other.yaml"), []byte("id: other\nas2:\n  as2_id: OTHER\n  certificates: [demo-partner.pem]\n  require_signature: true\n"), 0o600)
	addr, admin = freePort(t), freePort(t)
	var limitsYAML string
	if budget > 0 {
		limitsYAML = fmt.Sprintf("limits:\n  memory_budget: %d\n", budget)
	}
	cfg := filepath.Join(dir, "gateway.yaml")
	os.WriteFile(cfg, gatewayYAML(t, addr, "sqlite:gw.db", parts, "handler:\n  inbox: inbox\nshutdown_timeout: 1s\n"+limitsYAML), 0o600)
	return addr, admin, startGateway(t, cfg, addr, "GATEWAY_ADMIN_LISTEN="+admin)
}

// rssOf returns a kB field of /proc/pid/status in bytes.
func rssOf(pid int, field string) int64 { return int64(heaptest.ProcStatus(pid, field)) }

// rssPeak measures the peak growth of the resident set of pid over its
// value when it starts, while run runs (VmHWM after resetting it through
// clear_refs, and VmRSS sampled every millisecond).
func rssPeak(t *testing.T, pid int, run func()) (idle, growth int64) {
	t.Helper()
	idle = rssOf(pid, "VmRSS")
	hwm := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) == nil
	var peak atomic.Int64
	peak.Store(idle)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if v := rssOf(pid, "VmRSS"); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	run()
	close(stop)
	<-done
	p := peak.Load()
	if hwm {
		p = max(p, rssOf(pid, "VmHWM"))
	}
	return idle, max(p-idle, 0)
}

// xmlAmplification is the envelope: a bare SOAP 1.2 envelope of
// 249 000 `<a b=""/>` (2.2 MB: under the 4 MiB envelope, the 250 000
// elements and the 128 attributes).
func xmlAmplification() []byte {
	var b bytes.Buffer
	b.WriteString(`<S:Envelope xmlns:S="http://www.w3.org/2003/05/soap-envelope"><S:Header/><S:Body>`)
	for range 249000 {
		b.WriteString(`<a b=""/>`)
	}
	b.WriteString(`</S:Body></S:Envelope>`)
	return b.Bytes()
}

func postEnvelope(url string, body []byte) (int, string, error) {
	resp, err := http.Post(url, "application/soap+xml", bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b), nil
}

// TestXMLAmplificationWithinBudget (issue 22 item 1): the 2.2 MB
// envelope grew the gateway by 51–58 MiB while the budget reserved 4 ×
// 2.2 MB; 16 at once took 1.1–1.4 GiB and stayed resident. Now its parsed
// tree is charged to the budget as it is built: one grows the gateway by
// at most 64 MiB, sixteen at once by no more than the budget (those that
// do not fit get 503), and the memory goes back once they are done.
func TestXMLAmplificationWithinBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the gateway")
	}
	addr, cmd := attackGateway(t, attackBudget)
	pid := cmd.Process.Pid
	url := "http://" + addr + "/as4"
	env := xmlAmplification()
	answer := func() error {
		st, body, err := postEnvelope(url, env)
		switch {
		case err != nil:
			return err
		case st == http.StatusServiceUnavailable:
		case strings.Contains(body, "EBMS:0009"):
		default:
			return fmt.Errorf("HTTP %d %.300q, want EBMS:0009 or 503", st, body)
		}
		return nil
	}
	idle0, one := rssPeak(t, pid, func() {
		if err := answer(); err != nil {
			t.Error(err)
		}
	})
	// What the request reserves at most: its body four times over and
	// its parsed tree.
	reserved := int64(len(env))*4 + as4.MaxXMLTreeBytes
	t.Logf("one %d-byte envelope: RSS +%d MiB (at most %d MiB reserved)", len(env), one>>20, reserved>>20)
	if one > min(maxRequestGrowth, reserved) {
		t.Errorf("one envelope grew the gateway by %d MiB, more than %d MiB (its reservation %d MiB)", one>>20, min(maxRequestGrowth, reserved)>>20, reserved>>20)
	}
	var busy atomic.Int32
	_, sixteen := rssPeak(t, pid, func() {
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, body, err := postEnvelope(url, env)
				switch {
				case err != nil:
					t.Error(err)
				case st == http.StatusServiceUnavailable:
					busy.Add(1)
				case !strings.Contains(body, "EBMS:0009"):
					t.Errorf("HTTP %d %.300q, want EBMS:0009 or 503", st, body)
				}
			}()
		}
		wg.Wait()
	})
	t.Logf("16 envelopes at once: RSS +%d MiB, %d answered 503", sixteen>>20, busy.Load())
	if sixteen > attackBudget {
		t.Errorf("16 envelopes at once grew the gateway by %d MiB, more than the budget of %d MiB", sixteen>>20, attackBudget>>20)
	}
	// Given back: the resident set returns near idle within seconds.
	var after int64
	start := time.Now()
	for time.Since(start) < 5*time.Second {
		time.Sleep(100 * time.Millisecond)
		if after = rssOf(pid, "VmRSS") - idle0; after <= maxRequestGrowth/4 {
			break
		}
	}
	t.Logf("resident %s after: +%d MiB over idle", time.Since(start).Round(100*time.Millisecond), after>>20)
	if after > maxRequestGrowth {
		t.Errorf("5 s after the envelopes the gateway still holds %d MiB more than idle", after>>20)
	}
}

// unsignedMultipart is a 99 MiB unsigned AS2 body: a multipart/mixed
// payload (not streamable) of one EDI part.
type unsignedMultipart struct{ io.Reader }

func newUnsignedMultipart() (unsignedMultipart, int64) {
	head := "--XX\r\nContent-Type: application/edi-x12\r\n\r\n"
	tail := "\r\n--XX--\r\n"
	n := int64(99<<20) - int64(len(head)+len(tail))
	r := io.MultiReader(strings.NewReader(head), io.LimitReader(repeatByte('J'), n), strings.NewReader(tail))
	return unsignedMultipart{r}, 99 << 20
}

type repeatByte byte

func (r repeatByte) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

func as2Request(url, from, id, contentType string, body io.Reader, length int64) *http.Request {
	req, _ := http.NewRequest(http.MethodPost, url, body)
	req.ContentLength = length
	for k, v := range map[string]string{"AS2-From": from, "AS2-To": "GATEWAY", "AS2-Version": "1.2",
		"Message-Id": "<" + id + "@attack>", "Disposition-Notification-To": "mdn@attack", "Content-Type": contentType} {
		req.Header.Set(k, v)
	}
	return req
}

// TestUnsignedAS2BodyStreamed (issue 22 item 4): an unsigned 99 MiB body
// from a known AS2-From cost 230 MB (four at once 587 MB) because its
// multipart payload was unwrapped in memory; the agreement requires
// signed messages, so it is refused from the streamed result.
func TestUnsignedAS2BodyStreamed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the gateway")
	}
	// The default budget (1 GiB), as in the issue: it admits the body.
	addr, cmd := attackGateway(t, 0)
	url := "http://" + addr + "/as2"
	send := func(id string) error {
		body, n := newUnsignedMultipart()
		resp, err := http.DefaultClient.Do(as2Request(url, "DEMO", id, "multipart/mixed; boundary=XX", body, n))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "requires signed messages") {
			return fmt.Errorf("HTTP %d %.300q, want an MDN refusing the unsigned message", resp.StatusCode, b)
		}
		return nil
	}
	for _, n := range []int{1, 4} {
		_, growth := rssPeak(t, cmd.Process.Pid, func() {
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := send(fmt.Sprintf("unsigned-%d-%d", n, i)); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
		})
		t.Logf("%d unsigned 99 MiB bodies at once: RSS +%d MiB", n, growth>>20)
		if growth > int64(n)*maxRequestGrowth/4 {
			t.Errorf("%d unsigned 99 MiB bodies at once grew the gateway by %d MiB, more than %d MiB", n, growth>>20, int64(n)*maxRequestGrowth/4>>20)
		}
	}
}

// slowBody opens a connection from source and sends the headers of req and
// then its body at rate bytes per second until ctx ends; it reports the
// status if the gateway answered before (0 otherwise).
func slowBody(ctx context.Context, t *testing.T, source, addr string, head string, rate int, status chan<- int) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Errorf("dial from %s: %v", source, err)
		status <- -1
		return
	}
	defer c.Close()
	if _, err := io.WriteString(c, head); err != nil {
		status <- -1
		return
	}
	answered := make(chan int, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	chunk := bytes.Repeat([]byte("J"), rate/10)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case st := <-answered:
			status <- st
			return
		case <-ctx.Done():
			status <- 0
			return
		case <-tick.C:
			if _, err := c.Write(chunk); err != nil {
				status <- <-answered
				return
			}
		}
	}
}

// TestSlowBodiesDoNotLockPartnersOut (issue 22 item 2): 140 slow bodies
// (Content-Length 100 MiB, a known AS2-From, 6 KB/s each) held 8 MiB of the
// budget each and every partner got 503. Scaled to a 256 MiB budget: from
// one source address (127.0.0.2), 16 such AS2 bodies (AS2-From DEMO) and 9
// slow 4 MiB AS4 envelopes (each held in memory, 16 MiB reserved). Today
// they take more than the whole budget; now a streamed body reserves what
// its buffers hold as it arrives and one source address at most half the
// budget (limits.memory_share_per_source): the source's last envelopes
// get 503, and a legitimate signed AS2 message from DEMO and an AS4 message
// from another address are processed while the attack lasts.
func TestSlowBodiesDoNotLockPartnersOut(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the gateway")
	}
	if c, err := net.DialTCP("tcp", &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 9}); err != nil && strings.Contains(err.Error(), "assign") {
		t.Skip("127.0.0.2 is not a loopback address here")
	} else if c != nil {
		c.Close()
	}
	addr, admin, cmd := attackGatewayAdmin(t, attackBudget)
	pid := cmd.Process.Pid
	idle := rssOf(pid, "VmRSS")
	hwm := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) == nil
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The admin /healthz, on fresh connections every 100 ms, answers
	// throughout the attack (a liveness probe must not restart the node).
	probes, probeFailures := 0, []string{}
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		probe := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		for ctx.Err() == nil {
			probes++
			resp, err := probe.Get("http://" + admin + "/healthz")
			if err != nil {
				probeFailures = append(probeFailures, err.Error())
			} else {
				if resp.StatusCode != http.StatusOK {
					probeFailures = append(probeFailures, resp.Status)
				}
				resp.Body.Close()
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	status := make(chan int, 64)
	var attackers int
	for i := range 16 {
		head := fmt.Sprintf("POST /as2 HTTP/1.1\r\nHost: %s\r\nAS2-From: DEMO\r\nAS2-To: GATEWAY\r\nAS2-Version: 1.2\r\nMessage-Id: <slow-%d@attack>\r\n"+
			"Content-Type: multipart/signed; protocol=\"application/pkcs7-signature\"; micalg=sha-256; boundary=B\r\nContent-Length: 104857600\r\n\r\n--B\r\n", addr, i)
		go slowBody(ctx, t, "127.0.0.2", addr, head, 6000, status)
		attackers++
	}
	const envelope = 4<<20 - 1
	for range 9 {
		head := fmt.Sprintf("POST /as4 HTTP/1.1\r\nHost: %s\r\nContent-Type: application/soap+xml\r\nContent-Length: %d\r\n\r\n<S:Envelope ", addr, envelope)
		go slowBody(ctx, t, "127.0.0.2", addr, head, 6000, status)
		attackers++
	}
	// The attack is under way once every body has been admitted or
	// refused.
	time.Sleep(3 * time.Second)

	demo := filepath.Dir(demoConfig(t))
	partner := readKeyPair(t, filepath.Join(demo, "partners", "demo-partner.pem"), filepath.Join(demo, "keys", "demo-partner.key"))
	gw := readKeyPair(t, filepath.Join(demo, "keys", "gateway.pem"), filepath.Join(demo, "keys", "gateway.key"))
	as2c := &as2client.Client{URL: "http://" + addr + "/as2", From: "DEMO", To: "GATEWAY",
		SignCert: partner.Cert, SignKey: partner.Key, SignDigest: "sha256",
		RecipientCerts: []*x509.Certificate{gw.Cert}, Cipher: "aes256-cbc", MDN: as2client.MDNSync, SignedMDN: true}
	msg, err := as2c.Prepare([]byte("UNB+UNOA:2+DEMO:14+GATEWAY:14+261204:1200+SLOW1'UNH+1+INVOIC:D:96A:UN'UNT+2+1'UNZ+1+SLOW1'"), "application/edifact", "invoice.edi")
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	res, err := as2c.Send(sctx, msg)
	if err != nil || !res.OK() {
		t.Errorf("legitimate AS2 message during the attack: %v %+v", err, res)
	}

	kp, err := endpoint.ParseKeyPair(mustRead(t, filepath.Join(demo, "partners", "demo-partner.pem")), mustRead(t, filepath.Join(demo, "keys", "demo-partner.key")))
	if err != nil {
		t.Fatal(err)
	}
	as4c := &client.Client{Signer: kp.Key.(crypto.Signer), Certificate: kp.Cert, Host: "demo.test",
		Encryption: &client.Encryption{Recipient: gw.Cert}}
	out, err := as4c.Build(&client.Message{
		MessageID: "legit-slow@demo.test",
		From:      as4.PartyID{Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered", Value: "urn:demo:partner"},
		To:        as4.PartyID{Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered", Value: "urn:demo:gateway"},
		Service:   "urn:demo:invoicing", Action: "Deliver",
		Payloads: []client.Payload{{MimeType: "application/edifact", Data: []byte("UNB+UNOA:2+DEMO:14+GATEWAY:14+261204:1200+SLOW2'UNH+1+INVOIC:D:96A:UN'UNT+2+1'UNZ+1+SLOW2'")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post("http://"+addr+"/as4", out.ContentType, bytes.NewReader(out.Body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "Receipt") {
		t.Errorf("legitimate AS4 message during the attack: HTTP %d %q", resp.StatusCode, b)
	}

	// The attackers that got an answer before the end were refused by
	// the budget: their source's share.
	refused := 0
collect:
	for {
		select {
		case st := <-status:
			attackers--
			if st == http.StatusServiceUnavailable {
				refused++
			}
		default:
			break collect
		}
	}
	peak := rssOf(pid, "VmRSS")
	if hwm {
		peak = max(peak, rssOf(pid, "VmHWM"))
	}
	t.Logf("%d slow bodies refused 503 while admitted ones still trickle in (%d); RSS +%d MiB", refused, attackers, (peak-idle)>>20)
	if peak-idle > attackBudget {
		t.Errorf("the attack grew the gateway by %d MiB, more than the budget of %d MiB", (peak-idle)>>20, attackBudget>>20)
	}
	if refused == 0 {
		t.Errorf("no slow body was refused: one source address held more than its share")
	}
	cancel()
	<-probeDone
	t.Logf("/healthz probes during the attack: %d, failed %d", probes, len(probeFailures))
	if len(probeFailures) > 0 || probes < 10 {
		t.Errorf("/healthz failed %d of %d probes during the attack: %v", len(probeFailures), probes, probeFailures[:min(5, len(probeFailures))])
	}
}

func mustRead(t *testing.T, name string) []byte {
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edigateway/gateway/as4/endpoint"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/xmlenc"
	"github.com/edigateway/gateway/partners"
)

// TestSendAS4Demo sends a file as the demo partner to an AS4 endpoint
// configured like the demo gateway, twice with the same message id: the
// handler runs once and the second run gets the first receipt again.
func TestSendAS4Demo(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	demo := filepath.Join(filepath.Dir(file), "..", "..", "testdata", "fixture")
	var calls atomic.Int64
	var got atomic.Value
	url := startDemoAS4(t, func(m *exchange.Message) {
		calls.Add(1)
		got.Store(m)
	})

	payload := filepath.Join(t.TempDir(), "invoice.xml")
	os.WriteFile(payload, []byte("<Invoice>demo</Invoice>\n"), 0o600)
	saved := filepath.Join(t.TempDir(), "receipt.xml")
	args := func(action, id string) []string {
		return []string{"send-as4", "-url", url,
			"-key", filepath.Join(demo, "keys", "demo-partner.key"), "-cert", filepath.Join(demo, "partners", "demo-partner.pem"),
			"-receipt-cert", filepath.Join(demo, "keys", "gateway.pem"), "-encrypt-cert", filepath.Join(demo, "keys", "gateway.pem"),
			"-from", "urn:demo:partner", "-from-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered",
			"-to", "urn:demo:gateway", "-to-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered",
			"-service", "urn:demo:invoicing", "-action", action, "-message-id", id,
			"-sign-alg", "rsa-sha512", "-cipher", "aes256-gcm", "-save-receipt", saved, payload}
	}
	var receipts []string
	for i := 0; i < 2; i++ {
		var out, errb bytes.Buffer
		if code := run(args("Deliver", "cli-1@demo"), &out, &errb); code != 0 {
			t.Fatalf("run %d: exit %d: %s", i, code, errb.String())
		}
		// The second run builds the message anew (new signature) under the
		// same id: the gateway replays the first receipt, which covers the
		// first transmission.
		want := []string{"sent cli-1@demo (1 attachments", "signature valid, 3 of 3 references acknowledged"}
		if i == 1 {
			want = []string{"sent cli-1@demo again", "earlier transmission"}
		}
		for _, w := range want {
			if !strings.Contains(out.String(), w) {
				t.Fatalf("run %d output lacks %q: %s", i, w, out.String())
			}
		}
		b, _ := os.ReadFile(saved)
		receipts = append(receipts, string(b))
	}
	if calls.Load() != 1 || receipts[0] != receipts[1] || receipts[0] == "" {
		t.Fatalf("handler ran %d times; receipts equal: %v", calls.Load(), receipts[0] == receipts[1])
	}
	m := got.Load().(*exchange.Message)
	if m.Partner != "demo" || m.Payloads[0].ContentType != "application/xml" || m.Headers.Get(endpoint.HeaderAction) != "Deliver" {
		t.Errorf("delivered %+v", m)
	}

	var out, errb bytes.Buffer
	if code := run(args("Cancel", "cli-2@demo"), &out, &errb); code != 1 || !strings.Contains(errb.String(), "EBMS:0010") || !strings.Contains(errb.String(), "cli-2@demo") {
		t.Fatalf("refused message: exit %d, stderr %s", code, errb.String())
	}
	if code := run([]string{"send-as4", "-url", "x"}, &out, &errb); code != 2 {
		t.Errorf("missing flags: exit %d", code)
	}

	// The sender's key as a PKCS#12 file (OpenSSL 3 default encryption),
	// no -cert, password from an environment variable.
	if _, err := exec.LookPath("openssl"); err == nil {
		p12 := filepath.Join(t.TempDir(), "demo-partner.p12")
		if b, err := exec.Command("openssl", "pkcs12", "-export", "-inkey", filepath.Join(demo, "keys", "demo-partner.key"),
			"-in", filepath.Join(demo, "partners", "demo-partner.pem"), "-passout", "pass:demo", "-out", p12).CombinedOutput(); err != nil {
			t.Fatalf("openssl: %v\n%s", err, b)
		}
		t.Setenv("GW_TEST_SEND_PASSWORD", "demo")
		a := args("Deliver", "cli-3@demo")
		for i := range a {
			if a[i] == "-key" {
				a[i+1] = p12
			}
			if a[i] == "-cert" {
				a[i], a[i+1] = "-key-password-env", "GW_TEST_SEND_PASSWORD"
			}
		}
		out.Reset()
		errb.Reset()
		if code := run(a, &out, &errb); code != 0 || !strings.Contains(out.String(), "3 of 3 references acknowledged") {
			t.Fatalf("PKCS#12 key: exit %d: %s%s", code, out.String(), errb.String())
		}
	} else if os.Getenv("CI") != "" {
		t.Fatal("openssl not installed (CI needs it to build the PKCS#12 key)")
	}
}

// startDemoAS4 serves demoAS4Endpoint and returns its URL.
func startDemoAS4(t *testing.T, handle func(m *exchange.Message)) string {
	t.Helper()
	srv := httptest.NewServer(demoAS4Endpoint(t, handle))
	t.Cleanup(srv.Close)
	return srv.URL + "/as4"
}

// demoAS4Endpoint is an AS4 endpoint configured like the demo gateway
// (memory dedup store) that hands every message to handle.
func demoAS4Endpoint(t *testing.T, handle func(m *exchange.Message)) http.Handler {
	t.Helper()
	dir, err := partners.Load(demoPath(t, "partners"))
	if err != nil {
		t.Fatal(err)
	}
	gw, err := endpoint.LoadKeyPair(demoPath(t, "keys/gateway.pem"), demoPath(t, "keys/gateway.key"))
	if err != nil {
		t.Fatal(err)
	}
	pl := &exchange.Pipeline{Store: dedup.NewMemoryStore(dedup.Options{Lease: time.Minute}), Log: slog.New(slog.DiscardHandler),
		Handler: exchange.HandlerFunc(func(ctx context.Context, m *exchange.Message) error {
			handle(m)
			return nil
		})}
	ep, err := endpoint.New(endpoint.Config{Partners: dir, Keys: []xmlenc.KeyPair{gw}, Pipeline: pl,
		PartyID: "urn:demo:gateway", PartyType: "urn:oasis:names:tc:ebcore:partyid-type:unregistered",
		Log: slog.New(slog.DiscardHandler), SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

// demoAS4Args are send-as4's flags to send as the demo partner to
// startDemoAS4's URL (the files follow further flags).
func demoAS4Args(t *testing.T, url string) []string {
	const unregistered = "urn:oasis:names:tc:ebcore:partyid-type:unregistered"
	return []string{"send-as4", "-url", url,
		"-key", demoPath(t, "keys/demo-partner.key"), "-cert", demoPath(t, "partners/demo-partner.pem"),
		"-receipt-cert", demoPath(t, "keys/gateway.pem"), "-encrypt-cert", demoPath(t, "keys/gateway.pem"),
		"-from", "urn:demo:partner", "-from-type", unregistered, "-to", "urn:demo:gateway", "-to-type", unregistered,
		"-service", "urn:demo:invoicing", "-action", "Deliver"}
}

// TestSendAS4StreamsSeveralFilesAndRepeats: send-as4 with two files, one
// of them 3 MiB, gzipped and encrypted, sent twice with -repeat 2: the
// handler runs once and gets both files exactly, both sends get a receipt
// that acknowledges every reference of the (identical) message, and
// -spool-dir is empty afterwards.
func TestSendAS4StreamsSeveralFilesAndRepeats(t *testing.T) {
	var calls atomic.Int64
	var got [][]byte
	url := startDemoAS4(t, func(m *exchange.Message) {
		calls.Add(1)
		for _, p := range m.Payloads {
			rc, err := p.Open()
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			got = append(got, b)
		}
	})
	big := make([]byte, 3<<20)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range big {
		big[i] = "0123456789ABCDEF"[rng.Uint32()%16]
	}
	small := []byte("<Invoice>demo</Invoice>\n")
	spool := t.TempDir()
	args := append(demoAS4Args(t, url), "-message-id", "repeat-1@demo", "-repeat", "2", "-spool-dir", spool,
		writePayload(t, "big.txt", big), writePayload(t, "invoice.xml", small))
	var out, errb bytes.Buffer
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errb.String())
	}
	if n := strings.Count(out.String(), "signature valid, 4 of 4 references acknowledged"); n != 2 || !strings.Contains(out.String(), "send 2 of 2") {
		t.Fatalf("%d verified receipts:\n%s", n, out.String())
	}
	if calls.Load() != 1 || len(got) != 2 || !bytes.Equal(got[0], big) || !bytes.Equal(got[1], small) {
		t.Fatalf("handler ran %d times with %d payloads", calls.Load(), len(got))
	}
	if left, _ := os.ReadDir(spool); len(left) != 0 {
		t.Errorf("-spool-dir keeps %d files", len(left))
	}
	if code := run(append(demoAS4Args(t, url), "-repeat", "0", "x"), &out, &errb); code != 2 {
		t.Errorf("-repeat 0: exit %d", code)
	}
}

// TestSendAS4ProgressOnTerminalOnly: send-as4 of a 3 MiB file draws its
// progress bar (preparing, then sending) on a terminal only.
func TestSendAS4ProgressOnTerminalOnly(t *testing.T) {
	url := startDemoAS4(t, func(*exchange.Message) {})
	big := make([]byte, 3<<20)
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	spool := t.TempDir()
	args := append(demoAS4Args(t, url), "-spool-dir", spool, writePayload(t, "big.bin", big))
	progressOnTerminalOnly(t, args, "references acknowledged", spool)
}

// TestSendAS4RetriesWhileBusy: a first answer 503 with Retry-After is
// followed, with -retry-for, by a resend of the very same bytes, which gets
// the receipt; without -retry-for the command fails naming the Retry-After.
func TestSendAS4RetriesWhileBusy(t *testing.T) {
	var calls atomic.Int64
	ep := demoAS4Endpoint(t, func(*exchange.Message) { calls.Add(1) })
	var bodies [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, b)
		if len(bodies) == 1 {
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		ep.ServeHTTP(w, r)
	}))
	defer srv.Close()
	file := writePayload(t, "order.edi", []byte("UNB+UNOC:3+DEMO+GATEWAY'"))
	var out, errb bytes.Buffer
	if code := run(append(demoAS4Args(t, srv.URL+"/as4"), "-retry-for", "30s", file), &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "busy: HTTP 503; resending in 1s") || !strings.Contains(out.String(), "3 of 3 references acknowledged") {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	if len(bodies) != 2 || !bytes.Equal(bodies[0], bodies[1]) || calls.Load() != 1 {
		t.Fatalf("%d posts (identical: %v), handler ran %d times", len(bodies), len(bodies) == 2 && bytes.Equal(bodies[0], bodies[1]), calls.Load())
	}
	bodies = nil
	out.Reset()
	errb.Reset()
	if code := run(append(demoAS4Args(t, srv.URL+"/as4"), file), &out, &errb); code != 1 || !strings.Contains(errb.String(), "HTTP 503, retry after 1 s") {
		t.Fatalf("without -retry-for: exit %d\n%s%s", code, out.String(), errb.String())
	}
}

// TestSendAS4AsPartnerFromConfig: with -config and -partner, send-as4
// needs only the partner's key and the file: URL, party ids, the P-Mode's
// service and action, the partner's certificate of the key and the
// gateway's receipt and encryption certificates come from the
// configuration. The demo partner requires encrypted messages (the
// default): -encrypt-cert none is refused with EBMS:0103.
func TestSendAS4AsPartnerFromConfig(t *testing.T) {
	var calls atomic.Int64
	url := startDemoAS4(t, func(*exchange.Message) { calls.Add(1) })
	listen := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/as4")
	cfg := operatorConfig(t, demoPath(t, "partners"), "")
	b, _ := os.ReadFile(cfg)
	os.WriteFile(cfg, bytes.Replace(b, []byte("listen: 127.0.0.1:0"), []byte("listen: "+listen), 1), 0o600)
	file := writePayload(t, "invoice.xml", []byte("<Invoice>demo</Invoice>\n"))

	var out, errb bytes.Buffer
	if code := run([]string{"send-as4", "-config", cfg, "-partner", "demo", "-key", demoPath(t, "keys/demo-partner.key"), file}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "signature valid, 3 of 3 references acknowledged") {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	if calls.Load() != 1 {
		t.Fatalf("handler ran %d times", calls.Load())
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"send-as4", "-config", cfg, "-partner", "demo", "-key", demoPath(t, "keys/demo-partner.key"), "-encrypt-cert", "none", file}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "EBMS:0103") {
		t.Fatalf("unencrypted: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if code := run([]string{"send-as4", "-config", cfg, "-partner", "nobody", "-key", demoPath(t, "keys/demo-partner.key"), file}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), `no AS4 partner "nobody"`) {
		t.Fatalf("unknown partner: exit %d\n%s", code, errb.String())
	}
	if calls.Load() != 1 {
		t.Fatalf("handler ran %d times", calls.Load())
	}
}

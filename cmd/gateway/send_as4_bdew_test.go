package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edigateway/gateway/as4/endpoint"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/brainpool/bptest"
	"github.com/edigateway/gateway/internal/wssec"
	"github.com/edigateway/gateway/internal/xmlenc"
	"github.com/edigateway/gateway/partners"
)

// TestSendAS4BDEW sends an EDIFACT file with -profile bdew and brainpool keys
// built by openssl to a gateway with a bdew partner, twice with one message
// id (one delivery, the receipt replayed); xmlsec1 verifies the saved receipt.
// Flags that contradict the profile are refused.
func TestSendAS4BDEW(t *testing.T) {
	pki := bptest.New(t)
	gw, sw := pki.Party("9900000000001"), pki.Party("9900000000002")
	pdir := t.TempDir()
	cert, _ := os.ReadFile(sw.Signing.CertFile)
	os.WriteFile(filepath.Join(pdir, "sw.pem"), cert, 0o600)
	tlsCert, _ := os.ReadFile(sw.TLS.CertFile)
	os.WriteFile(filepath.Join(pdir, "sw-tls.pem"), tlsCert, 0o600)
	os.WriteFile(filepath.Join(pdir, "sw.yaml"), []byte("id: stadtwerke\nas4:\n  profile: bdew\n  party_id: \"9900000000002\"\n  certificates: [sw.pem]\n  tls_certificates: [sw-tls.pem]\n  pmodes:\n    - id: mp\n      agreement: "+partners.BDEWAgreement+"\n"), 0o600)
	d, err := partners.Load(pdir)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	var mu sync.Mutex
	var last *exchange.Message // the last message delivered
	var lastBody []byte        // the last HTTP body received
	pl := &exchange.Pipeline{Store: dedup.NewMemoryStore(dedup.Options{Lease: time.Minute}), Log: slog.New(slog.DiscardHandler),
		Handler: exchange.HandlerFunc(func(ctx context.Context, m *exchange.Message) error {
			calls.Add(1)
			mu.Lock()
			last = m
			mu.Unlock()
			return nil
		})}
	sig, err := endpoint.LoadKeyPair(gw.Signing.CertFile, gw.Signing.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := endpoint.LoadKeyPair(gw.Encrypt.CertFile, gw.Encrypt.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := endpoint.New(endpoint.Config{Partners: d, Keys: []xmlenc.KeyPair{sig, enc}, Pipeline: pl,
		PartyID: gw.ID, PartyType: partners.PartyTypeGLN, Log: slog.New(slog.DiscardHandler),
		ClientCertHeader: "X-SSL-Client-Cert", TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}})
	if err != nil {
		t.Fatal(err)
	}
	// The profile requires mutual TLS, which Go's TLS cannot do with
	// brainpool certificates: a TLS-terminating proxy in front of the
	// endpoint forwards the partner's verified TLS certificate.
	proxied := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("X-SSL-Client-Cert", base64.StdEncoding.EncodeToString(sw.TLS.Cert.Raw))
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		lastBody = body
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		ep.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(proxied)
	defer srv.Close()

	edi := filepath.Join(t.TempDir(), "utilmd.edi")
	os.WriteFile(edi, []byte("UNA:+.? 'UNB+UNOC:3+9900000000002:500+9900000000001:500+250101:1200+ICR1'UNH+1+UTILMD:D:11A:UN:S2.1'UNT+2+1'UNZ+1+ICR1'"), 0o600)
	saved := filepath.Join(t.TempDir(), "receipt.xml")
	args := func(extra ...string) []string {
		a := []string{"send-as4", "-profile", "bdew", "-url", srv.URL,
			"-key", sw.Signing.KeyFile, "-cert", sw.Signing.CertFile,
			"-receipt-cert", gw.Signing.CertFile, "-encrypt-cert", gw.Encrypt.CertFile,
			"-from", sw.ID, "-to", gw.ID, "-service", "https://www.bdew.de/as4/communication/services/MP",
			"-action", "http://docs.oasis-open.org/ebxml-msg/as4/200902/action", "-message-id", "bdew-1@9900000000002",
			"-mime", "application/edifact", "-save-receipt", saved}
		return append(append(a, extra...), edi)
	}
	for i := 0; i < 2; i++ {
		var out, errb bytes.Buffer
		if code := run(args(), &out, &errb); code != 0 {
			t.Fatalf("run %d: exit %d: %s", i, code, errb.String())
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("handler ran %d times", calls.Load())
	}
	// What phase4's BDEW sender writes: an empty eb:ConversationId, and
	// ConcatKDFParams that Santuario's ConcatKDF (behind phase4) accepts:
	// no PartyUInfo/PartyVInfo ("00" is too short for it).
	mu.Lock()
	sent, delivered := string(lastBody), last
	mu.Unlock()
	if !strings.Contains(sent, "<eb:ConversationId/>") {
		t.Errorf("eb:ConversationId is not empty")
	}
	if _, ok := delivered.Headers[endpoint.HeaderConversationID]; ok {
		t.Errorf("conversation id delivered: %q", delivered.Headers.Get(endpoint.HeaderConversationID))
	}
	if !strings.Contains(sent, "ConcatKDFParams") || strings.Contains(sent, "PartyUInfo") || strings.Contains(sent, "PartyVInfo") {
		t.Errorf("ConcatKDFParams missing or with PartyUInfo/PartyVInfo")
	}
	rc, _ := os.ReadFile(saved)
	if !bytes.Contains(rc, []byte(wssec.ValueTypeX509PKIPathv1)) || !bytes.Contains(rc, []byte(wssec.AlgECDSASHA256)) {
		t.Fatalf("receipt: %s", rc)
	}
	if path, err := exec.LookPath("xmlsec1"); err == nil {
		f := filepath.Join(t.TempDir(), "r.xml")
		os.WriteFile(f, rc, 0o600)
		if out, err := exec.Command(path, "--verify", "--pubkey-cert-pem", gw.Signing.CertFile, "--id-attr:Id", "Messaging", "--id-attr:Id", "Body", f).CombinedOutput(); err != nil {
			t.Fatalf("xmlsec1: %v: %s", err, out)
		}
	} else if os.Getenv("CI") != "" {
		t.Fatal("xmlsec1 not installed")
	}

	// The BDEW part properties of the main payload, when given.
	{
		var out, errb bytes.Buffer
		a := args("-bdew-document-type", "A01", "-bdew-document-no", "2", "-bdew-document-date", "2024-10-07",
			"-bdew-fulfillment-date", "2024-10-07T22:00Z/2024-10-08T22:00Z", "-bdew-subject-party-id", "10XEN-VE-FRISMK",
			"-bdew-subject-party-role", "A08", "-bdew-application-reference", "FP")
		for i := range a {
			if a[i] == "bdew-1@9900000000002" {
				a[i] = "bdew-2@9900000000002"
			}
		}
		if code := run(a, &out, &errb); code != 0 {
			t.Fatalf("with part properties: exit %d: %s", code, errb.String())
		}
		mu.Lock()
		delivered = last
		mu.Unlock()
		if delivered.MessageID != "bdew-2@9900000000002" {
			t.Fatalf("delivered %s", delivered.MessageID)
		}
		for k, want := range map[string]string{"BDEWDocumentType": "A01", "BDEWDocumentNo": "2", "BDEWDocumentDate": "2024-10-07",
			"BDEWFulfillmentDate": "2024-10-07T22:00Z/2024-10-08T22:00Z", "BDEWSubjectPartyID": "10XEN-VE-FRISMK",
			"BDEWSubjectPartyRole": "A08", "BDEWApplicationReference": "FP"} {
			if got := delivered.Payloads[0].Properties[k]; got != want {
				t.Errorf("part property %s = %q, want %q", k, got, want)
			}
		}
	}
	{
		// Without the profile, the BDEW part properties are refused.
		var out, errb bytes.Buffer
		a := args("-bdew-document-type", "A01")
		a = append(a[:1:1], a[3:]...) // no -profile bdew
		if code := run(a, &out, &errb); code != 2 || !strings.Contains(errb.String(), "need -profile bdew") {
			t.Errorf("part properties without the profile: exit %d: %s", code, errb.String())
		}
	}
	for _, bad := range [][]string{{"-cipher", "aes256-gcm"}, {"-sign-alg", "ecdsa-sha512"}, {"-digest", "sha512"}, {"-key-transport", "rsa-oaep"}, {"-compress=false"}, {"-conversation", "c-1"}} {
		var out, errb bytes.Buffer
		if code := run(args(bad...), &out, &errb); code != 2 || !strings.Contains(errb.String(), "-profile bdew") {
			t.Errorf("%v: exit %d: %s", bad, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	noEnc := args()
	for i, a := range noEnc {
		if a == "-encrypt-cert" {
			noEnc = append(noEnc[:i:i], noEnc[i+2:]...)
			break
		}
	}
	if code := run(noEnc, &out, &errb); code != 2 || !strings.Contains(errb.String(), "-encrypt-cert is required") {
		t.Errorf("without -encrypt-cert: exit %d: %s", code, errb.String())
	}
}

package main

import (
	"encoding/pem"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/brainpool/bptest"
	"github.com/edigateway/gateway/internal/submitapi"
	"github.com/edigateway/gateway/partners"
)

// TestSendAS4BDEWVerifiedByForeignTools: the real gateway binary, with a
// brainpool identity made by openssl, sends with the BDEW profile to a
// partner (over TLS, its certificate pinned); the WS-Security signature of
// what it posts verifies against our signing certificate with xmlsec1 (the
// references to eb:Messaging and the Body), Python's canonicalization and
// openssl (the brainpoolP256r1 ECDSA SignatureValue over ds:SignedInfo).
// The attachment's own digest is not checked here: under the profile it is
// encrypted (ECDH-ES, AES-GCM), which none of these tools decrypts in SwA
// (TestSendAS4BDEWDecryptedByNode decrypts it with Node.js).
// The partner answers 503: the message stays queued.
func TestSendAS4BDEWVerifiedByForeignTools(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the gateway binary")
	}
	openssl, xmlsec1, python := needTool(t, "openssl"), needTool(t, "xmlsec1"), needTool(t, "python3")
	pki := bptest.New(t)
	us, sw := pki.Party("9900000000001"), pki.Party("9900000000002")

	type capture struct {
		envelope    []byte
		attachments int
		err         error
	}
	got := make(chan capture, 4)
	var once sync.Once
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c capture
		mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "multipart/related" {
			c.err = fmt.Errorf("content type %q", r.Header.Get("Content-Type"))
		} else {
			mr := multipart.NewReader(r.Body, params["boundary"])
			for i := 0; ; i++ {
				part, err := mr.NextRawPart()
				if err != nil {
					if err != io.EOF {
						c.err = err
					}
					break
				}
				b, _ := io.ReadAll(part)
				if i == 0 {
					c.envelope = b
				} else {
					c.attachments++
				}
			}
		}
		once.Do(func() { got <- c })
		http.Error(w, "try again later", http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	s := startBDEWSender(t, us, sw, srv)

	edi := "UNA:+.? 'UNB+UNOC:3+9900000000001:500+9900000000002:500+261204:1200+FOREIGN1'UNH+1+UTILMD:D:11A:UN:S2.1'UNT+2+1'UNZ+1+FOREIGN1'"
	sub := s.submit(t, "stadtwerke", "", []byte(edi))
	var c capture
	select {
	case c = <-got:
	case <-time.After(30 * time.Second):
		st := s.status(t, sub.ID)
		t.Fatalf("nothing posted: state %s, last_error %q", st.State, st.LastError)
	}
	if c.err != nil {
		t.Fatal(c.err)
	}
	for _, want := range []string{"ecdsa-sha256", "X509PKIPathv1", "<eb:ConversationId/>"} {
		if !strings.Contains(string(c.envelope), want) {
			t.Errorf("the BDEW message has no %s", want)
		}
	}
	if err := verifyEnvelope(openssl, xmlsec1, python, t.TempDir(), c.envelope, us.Signing.CertFile, c.attachments); err != nil {
		t.Fatalf("foreign tools on the BDEW message: %v", err)
	}
	// Another key does not verify it.
	if err := verifyEnvelope(openssl, xmlsec1, python, t.TempDir(), c.envelope, sw.Signing.CertFile, c.attachments); err == nil {
		t.Fatal("the BDEW message verified with the partner's certificate")
	}
	st := s.waitStatus(t, sub.ID, 10*time.Second, "tried", func(st submitapi.Status) bool { return st.Attempts >= 1 && st.LastError != "" })
	if (st.State != "queued" && st.State != "sending") || !containsAny(st.LastError, "503") {
		t.Errorf("after a 503: state %s, last_error %q", st.State, st.LastError)
	}
}

// startBDEWSender runs the gateway binary as us (a brainpool identity from
// bptest) with one partner, "stadtwerke" (sw), under the BDEW profile,
// sending to srv over TLS with srv's certificate pinned.
func startBDEWSender(t *testing.T, us, sw bptest.Party, srv *httptest.Server) *obSender {
	t.Helper()
	dir := t.TempDir()
	pdir := filepath.Join(dir, "partners")
	os.Mkdir(pdir, 0o755)
	copyFile := func(from, to string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(sw.Signing.CertFile, filepath.Join(pdir, "sw.pem"))
	copyFile(sw.Encrypt.CertFile, filepath.Join(pdir, "sw-enc.pem"))
	copyFile(sw.TLS.CertFile, filepath.Join(pdir, "sw-tls.pem"))
	os.WriteFile(filepath.Join(pdir, "stub-tls.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600)
	os.WriteFile(filepath.Join(pdir, "sw.yaml"), []byte(`id: stadtwerke
as4:
  profile: bdew
  party_id: "9900000000002"
  certificates: [sw.pem]
  tls_certificates: [sw-tls.pem]
  pmodes:
    - id: mp
      agreement: `+partners.BDEWAgreement+`
      service: https://www.bdew.de/as4/communication/services/MP
      action: http://docs.oasis-open.org/ebxml-msg/as4/200902/action
  send:
    url: "`+srv.URL+`/as4"
    pmode: {id: mp}
    encryption_certificate: sw-enc.pem
    tls: {pinned_certificate: stub-tls.pem}
    timeout: 10s
    retry: {first: 1s, factor: 2, max: 4s, give_up_after: 1h}
`), 0o600)
	addr := freePort(t)
	s := &obSender{dir: dir, admin: freePort(t), auditFile: filepath.Join(dir, "audit.jsonl")}
	cfg := filepath.Join(dir, "gateway.yaml")
	os.WriteFile(cfg, fmt.Appendf(nil, `listen: %s
store: sqlite:%s
partners: %s
identity:
  as2_id: GATEWAY
  party_id: "9900000000001"
  party_type: %s
  keys:
    - cert: %s
      key: %s
handler: {type: dir, inbox: %s}
audit: {file: %s}
shutdown_timeout: 2s
drain_period: 0s
`, addr, filepath.Join(dir, "gw.db"), pdir, partners.PartyTypeGLN, us.Signing.CertFile, us.Signing.KeyFile, filepath.Join(dir, "inbox"), s.auditFile), 0o600)
	startGateway(t, cfg, addr, "GATEWAY_ADMIN_LISTEN="+s.admin)
	return s
}

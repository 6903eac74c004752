package server

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/testpki"
	"github.com/edigateway/gateway/internal/trust/trusttest"
	"github.com/edigateway/gateway/mdn"
	"github.com/edigateway/gateway/outbound"
)

// TestSendCATrustAsyncMDN: a partner under trust: ca with as2.send and
// as4.send and no certificates gets its CA policy, checked by the
// gateway's shared trust checker, in both transmitters' settings; its
// async MDN (mdnIntake, the AS2 endpoint's MDN receiver) settles our
// message delivered when signed by a certificate of its CA that matches
// certificate_subject, the evidence naming the signer and the decision,
// and is refused (403, the message still awaiting, the audit naming the
// certificate and the decision) when signed by a certificate of its CA
// with another name or of another CA. Before, the MDN was refused for
// every signer: "a signed MDN is required and the partner has no
// certificate".
func TestSendCATrustAsyncMDN(t *testing.T) {
	ctx := context.Background()
	root := trusttest.NewRoot(t, "Globex Root CA")
	ica := root.NewIntermediate(t, "Globex Issuing CA")
	good := ica.Issue(t, trusttest.Leaf{CommonName: "AS2 GLOBEX Prod", Organization: []string{"Globex Corp"}})
	wrongName := ica.Issue(t, trusttest.Leaf{CommonName: "AS2 Initech", Organization: []string{"Initech"}})
	otherCA := trusttest.NewRoot(t, "Other Root CA").Issue(t, trusttest.Leaf{CommonName: "AS2 GLOBEX Prod", Organization: []string{"Globex Corp"}})

	pdir := t.TempDir()
	for name, text := range map[string][]byte{
		"root.pem": testpki.CertPEM(root.Cert), "ica.pem": testpki.CertPEM(ica.Cert),
		"globex.yaml": []byte("id: globex\nas2:\n  as2_id: GLOBEX\n  trust: ca\n  ca_certificates: [root.pem]\n  intermediates: [ica.pem]\n" +
			"  certificate_subject: \"CN=AS2 GLOBEX*,O=Globex*\"\n" +
			"  send:\n    url: \"https://as2.globex.example/as2\"\n    cipher: none\n    mdn: async\n    async_mdn_url: \"https://gw.example/as2\"\n" +
			"as4:\n  party_id: urn:globex\n  trust: ca\n  ca_certificates: [root.pem]\n  certificate_subject: \"CN=AS4 GLOBEX*\"\n  pmodes: [{id: p}]\n" +
			"  send:\n    url: \"https://as4.globex.example/as4\"\n    encrypt: false\n    filename_property: FileName\n"),
	} {
		if err := os.WriteFile(filepath.Join(pdir, name), text, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := demoConfig(t)
	cfg.Partners = pdir
	s, err := New(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	as2s, err := s.as2SendSettings("globex")
	if err != nil {
		t.Fatal(err)
	}
	if as2s.CA == nil || as2s.CA.Policy.Subject != "CN=AS2 GLOBEX*,O=Globex*" || as2s.CA.Checker != s.trust || s.trust == nil || len(as2s.PartnerCerts) != 0 {
		t.Fatalf("as2 settings: CA %+v, partner certificates %d", as2s.CA, len(as2s.PartnerCerts))
	}
	as4s, err := s.as4SendSettings("globex")
	if err != nil {
		t.Fatal(err)
	}
	if as4s.CA == nil || as4s.CA.Policy.Subject != "CN=AS4 GLOBEX*" || as4s.CA.Checker != s.trust || len(as4s.ReceiptSigners) != 0 {
		t.Fatalf("as4 settings: CA %+v, receipt signers %d", as4s.CA, len(as4s.ReceiptSigners))
	}
	// as4.send.filename_property reaches the Transmitter (which sends a
	// submission's file name under it: TestAS4PartPropertyFilenameClash).
	if as4s.FilenameProperty != "FileName" {
		t.Fatalf("as4 settings: FilenameProperty %q", as4s.FilenameProperty)
	}

	// An AS2 message of ours to globex awaiting its async MDN.
	const msgID, mic = "<ca-1@GATEWAY>", "7v7F++fQaNbmTIVS0J7Nxsd3fW3PhxZ3l1+ZF7E8ntU="
	st := s.sending.store
	if _, _, err := st.Submit(ctx, outbound.Message{ID: "ca-1", Partner: "globex", Protocol: outbound.AS2, MessageID: msgID},
		strings.NewReader("UNB+1'")); err != nil {
		t.Fatal(err)
	}
	leased, err := st.Lease(ctx, 1, time.Minute)
	if err != nil || len(leased) != 1 {
		t.Fatalf("lease: %d %v", len(leased), err)
	}
	tok := leased[0].LeaseToken
	if err := st.Posting(ctx, "ca-1", tok, mic+", sha-256"); err != nil {
		t.Fatal(err)
	}
	if err := st.Awaiting(ctx, "ca-1", tok, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	_, globex, _ := s.partnerByID("globex")
	signedMDN := func(by trusttest.Issued) (http.Header, []byte) {
		t.Helper()
		entity := mdn.BuildEntity(mdn.Report{ReportingUA: "globex", OriginalMessageID: msgID, MIC: mic, MICAlg: "sha-256",
			FinalRecipient: "GLOBEX"})
		ct, body, err := mdn.Sign(entity, "sha-256", func(content []byte) ([]byte, error) {
			return cms.Sign(content, by.Cert, by.Key, cms.SignOptions{Digest: "sha256"})
		})
		if err != nil {
			t.Fatal(err)
		}
		return http.Header{"Content-Type": {ct}, "As2-From": {"GLOBEX"}, "As2-To": {"GATEWAY"}, "Message-Id": {"<mdn-" + by.Cert.SerialNumber.String() + "@GLOBEX>"}}, body
	}
	intake := mdnIntake{s}
	for _, refused := range []struct {
		name    string
		by      trusttest.Issued
		phrases []string
	}{
		{"another name", wrongName, []string{"CN=AS2 Initech,O=Initech", "does not match the partner's certificate subject"}},
		{"another CA", otherCA, []string{"CN=Other Root CA", "does not chain to a configured CA"}},
	} {
		h, body := signedMDN(refused.by)
		if v := intake.ReceiveMDN(ctx, globex, h, body); v.Status != http.StatusForbidden {
			t.Errorf("%s: verdict %+v, want 403", refused.name, v)
		}
		if m, err := st.Get(ctx, "ca-1"); err != nil || m.State != outbound.AwaitingMDN {
			t.Fatalf("%s: message %+v %v", refused.name, m, err)
		}
		b, _ := os.ReadFile(cfg.Audit.File)
		for _, p := range append([]string{"refused/untrusted"}, refused.phrases...) {
			if !strings.Contains(string(b), p) {
				t.Errorf("%s: the audit does not name the refusal (%q)", refused.name, p)
			}
		}
	}
	h, body := signedMDN(good)
	if v := intake.ReceiveMDN(ctx, globex, h, body); v.Status != http.StatusOK {
		t.Fatalf("CA-issued signer: verdict %+v", v)
	}
	m, err := st.Get(ctx, "ca-1")
	if err != nil || m.State != outbound.Delivered || m.Evidence == nil ||
		!strings.Contains(m.Evidence.Signer, "AS2 GLOBEX Prod") || !strings.Contains(m.Evidence.Signer, "trust: ca trusted/not-checked") {
		t.Fatalf("message %+v evidence %+v err %v", m, m.Evidence, err)
	}
}

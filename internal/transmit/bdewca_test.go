package transmit_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/endpoint"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/brainpool/bptest"
	"github.com/edigateway/gateway/internal/transmit"
	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/internal/trust/trusttest"
	"github.com/edigateway/gateway/internal/wssec"
	"github.com/edigateway/gateway/internal/xmlenc"
	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/partners"
	"github.com/edigateway/gateway/receipt"
)

// How a BDEW receiver names the signer of its receipts.
const (
	// refPKIPath: an X509PKIPathv1 BinarySecurityToken and a
	// wsse:Reference to it, as the BDEW profile asks (§2.2.6.2: phase4's
	// BDEW default, and what our endpoint sends to bdew partners).
	refPKIPath = "pkipath"
	// refX509SKI: ds:X509Data/ds:X509SKI in the SecurityTokenReference and
	// no token: the certificate is not in the answer.
	refX509SKI = "x509ski"
	// refKeyIdentifierSKI: a wsse:KeyIdentifier of ValueType
	// X509SubjectKeyIdentifier (WSS4J's SKI_KEY_IDENTIFIER), no token.
	refKeyIdentifierSKI = "keyidentifier-ski"
	// refX509SKIWithToken: ds:X509SKI, the PKIPath token still in the
	// header.
	refX509SKIWithToken = "x509ski+token"
)

// bdewReceiver is a BDEW partner's AS4 endpoint as far as its receipts
// go: it answers every user message with a receipt for the message's
// signed references (read from the header; the payload stays encrypted),
// signed ECDSA-SHA256 with a brainpoolP256r1 key, naming the signer as ref
// says.
type bdewReceiver struct {
	mu     sync.Mutex
	signer bptest.KeyPair
	ref    string
}

func (b *bdewReceiver) set(signer bptest.KeyPair, ref string) {
	b.mu.Lock()
	b.signer, b.ref = signer, ref
	b.mu.Unlock()
}

func (b *bdewReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	signer, ref := b.signer, b.ref
	b.mu.Unlock()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out, err := bdewReceipt(r.Header.Get("Content-Type"), body, signer, ref)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/soap+xml; charset=utf-8")
	w.Write(out)
}

// bdewReceipt is the signed receipt of the user message in body.
func bdewReceipt(contentType string, body []byte, signer bptest.KeyPair, ref string) ([]byte, error) {
	env, err := as4.ReadMessage(contentType, bytes.NewReader(body), as4.Limits{})
	if err != nil {
		return nil, err
	}
	defer env.Close()
	sig, err := wssec.ParseSignature(env.Doc, wssec.VerifyOptions{})
	if err != nil {
		return nil, err
	}
	el, err := env.Messaging()
	if err != nil {
		return nil, err
	}
	m, err := as4.ParseMessaging(el)
	if err != nil {
		return nil, err
	}
	var refs []receipt.Reference
	for _, r := range sig.References {
		rr := receipt.Reference{URI: r.URI, DigestMethod: r.DigestMethod, DigestValue: r.DigestValue}
		for _, t := range r.Transforms {
			rr.Transforms = append(rr.Transforms, receipt.Transform{Algorithm: t.Algorithm, PrefixList: t.PrefixList})
		}
		refs = append(refs, rr)
	}
	rc, err := receipt.BuildReceipt(m.UserMessage, refs, receipt.Options{Host: "bdew.example"})
	if err != nil {
		return nil, err
	}
	if err := wssec.Sign(rc.Doc, nil, wssec.SignOptions{Signer: signer.Key, Certificate: signer.Cert, PKIPath: true}); err != nil {
		return nil, err
	}
	if ref != refPKIPath {
		// ds:KeyInfo is outside the SignedInfo: naming the key otherwise
		// leaves the signature valid.
		sec := rc.Doc.FindElement("//Header/Security")
		ki := rc.Doc.FindElement("//Security/Signature/KeyInfo")
		for _, c := range ki.ChildElements() {
			ki.RemoveChild(c)
		}
		str := ki.CreateElement("wsse:SecurityTokenReference")
		ski := base64.StdEncoding.EncodeToString(signer.Cert.SubjectKeyId)
		if ref == refKeyIdentifierSKI {
			kid := str.CreateElement("wsse:KeyIdentifier")
			kid.CreateAttr("ValueType", wssec.ValueTypeX509SKI)
			kid.CreateAttr("EncodingType", wssec.EncodingBase64Binary)
			kid.SetText(ski)
		} else {
			str.CreateElement("ds:X509Data").CreateElement("ds:X509SKI").SetText(ski)
		}
		if ref != refX509SKIWithToken {
			sec.RemoveChild(sec.SelectElement("BinarySecurityToken"))
		}
	}
	return rc.Doc.WriteToBytes()
}

// A BDEW partner under trust: ca (its brainpool CA, CRLs) that we send to:
// its receipts, signed by a brainpoolP256r1 certificate of its CA that
// comes as an X509PKIPathv1 token (the profile's form), deliver our
// message when the policy accepts the signer (a renewed certificate too,
// with nothing listed), and are unverifiable (retried, the reason naming
// the certificate and the policy's decision) when the signer is of
// another CA, revoked by the CA's CRL, expired, or not the subject the
// policy names. A receipt that names its signer by subject key identifier
// only (ds:X509SKI or a KeyIdentifier, no token) carries no certificate
// for the policy to judge: it verifies only against a listed certificate
// (as4.certificates), which the policy then judges as well; with none
// listed it is retried, never delivered unverified.
func TestAS4BDEWCATrustReceipt(t *testing.T) {
	pki := bptest.New(t)
	gw, us := pki.Party("9900000000001"), pki.Party("9900000000002")
	const usage = "digitalSignature,nonRepudiation"
	renewed := pki.Issue("gw-sig-2", "/O=BDEW test/CN=9900000000001.sig2", usage)
	revoked := pki.Issue("gw-sig-old", "/O=BDEW test/CN=9900000000001.sig-old", usage)
	now := time.Now()
	expired := pki.IssueDated("gw-sig-expired", "/O=BDEW test/CN=9900000000001.sig-expired", usage,
		now.Add(-60*24*time.Hour), now.Add(-24*time.Hour))
	foreign := bptest.New(t).Issue("gw-sig-foreign", "/O=BDEW test/CN=9900000000001.sig", usage)
	crls := trusttest.ServeFiles(t)
	crls.Set("/bdew.crl", bptest.CRL(t, pki.CA, now.Add(-time.Hour), now.Add(time.Hour), revoked.Cert))

	recv := &bdewReceiver{}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	var ct *transmit.CATrust
	var listed []*x509.Certificate
	id := transmit.Identity{PartyID: us.ID, PartyType: partners.PartyTypeGLN, Cert: us.Signing.Cert, Key: us.Signing.Key}
	tr := transmit.NewAS4(func(string) (transmit.Identity, error) { return id, nil }, func(string) (*transmit.AS4Settings, error) {
		return &transmit.AS4Settings{URL: srv.URL, To: as4.PartyID{Value: gw.ID, Type: partners.PartyTypeGLN},
			AgreementRef: partners.BDEWAgreement, Service: "https://www.bdew.de/as4/communication/services/MP",
			Action: "http://docs.oasis-open.org/ebxml-msg/as4/200902/action", Profile: transmit.ProfileBDEW,
			ReceiptSigners: listed, CA: ct, EncryptTo: gw.Encrypt.Cert, ReceiptRequired: true}, nil
	}, t.TempDir())
	policy := func(subject string) *transmit.CATrust {
		return &transmit.CATrust{Checker: &trust.Checker{}, Policy: &trust.CAPolicy{Roots: []*x509.Certificate{pki.CA.Cert},
			Subject: subject, Revocation: trust.Revocation{Mode: trust.ModeCRL, CRLURLs: []string{crls.URL + "/bdew.crl"}}}}
	}
	const ours = "CN=9900000000001.*,O=BDEW test"
	n := 0
	for _, tc := range []struct {
		name    string
		signer  bptest.KeyPair
		ref     string
		subject string
		listed  []*x509.Certificate
		deliver bool
		// phrases of Evidence.Signer (delivered) or of the reason.
		phrases []string
	}{
		{"PKIPath, certificate of the CA", gw.Signing, refPKIPath, ours, nil, true,
			[]string{"CN=9900000000001.sig,O=BDEW test", "trust: ca trusted/good from crl " + crls.URL}},
		{"PKIPath, renewed certificate, not listed", renewed, refPKIPath, ours, nil, true, []string{"9900000000001.sig2", "trusted/good"}},
		{"PKIPath, certificate of another CA", foreign, refPKIPath, ours, nil, false,
			[]string{"refused/untrusted", `"CN=9900000000001.sig,O=BDEW test"`, "does not chain to a configured CA"}},
		{"PKIPath, revoked by the CRL", revoked, refPKIPath, ours, nil, false,
			[]string{"refused/revoked", "9900000000001.sig-old", "is revoked", "crl " + crls.URL}},
		{"PKIPath, expired", expired, refPKIPath, ours, nil, false,
			[]string{"refused/expired", "9900000000001.sig-expired", "expired on"}},
		{"PKIPath, subject not the policy's", gw.Signing, refPKIPath, "CN=9900000000009.*", nil, false,
			[]string{"refused/untrusted", "9900000000001.sig", `does not match the partner's certificate subject "CN=9900000000009.*"`}},
		{"X509SKI, PKIPath token in the header", gw.Signing, refX509SKIWithToken, ours, nil, true, []string{"9900000000001.sig", "trusted/good"}},
		{"X509SKI only, nothing listed", gw.Signing, refX509SKI, ours, nil, false,
			[]string{"subject key identifier", "no certificate", "trust: ca"}},
		{"KeyIdentifier SKI only, nothing listed", gw.Signing, refKeyIdentifierSKI, ours, nil, false,
			[]string{"subject key identifier", "no certificate", "trust: ca"}},
		{"X509SKI only, listed certificate", gw.Signing, refX509SKI, ours, certs(gw.Signing.Cert), true,
			[]string{"9900000000001.sig", "trust: ca trusted/good from crl"}},
		{"X509SKI only, listed certificate revoked", revoked, refX509SKI, ours, certs(revoked.Cert), false,
			[]string{"refused/revoked", "9900000000001.sig-old"}},
		{"X509SKI only, listed certificate of another subject", gw.Signing, refX509SKI, "CN=9900000000009.*", certs(gw.Signing.Cert), false,
			[]string{"refused/untrusted", "does not match the partner's certificate subject"}},
		{"X509SKI only, another certificate listed", gw.Signing, refX509SKI, ours, certs(renewed.Cert), false,
			[]string{"subject key identifier"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recv.set(tc.signer, tc.ref)
			ct, listed = policy(tc.subject), tc.listed
			n++
			m := &outbound.Message{Partner: "stadtwerke", Protocol: outbound.AS4, MessageID: "bdew-ca-" + string(rune('a'+n)) + "@" + us.ID,
				ContentType: "application/edifact"}
			a := attempt(t, tr, m, []byte(edi))
			if tc.deliver {
				if a.Outcome != outbound.Deliver || a.Evidence == nil || a.Evidence.Kind != "receipt" {
					t.Fatalf("attempt %+v, want delivered on the receipt", a)
				}
				for _, p := range tc.phrases {
					if !contains(a.Evidence.Signer, p) {
						t.Errorf("evidence signer %q lacks %q", a.Evidence.Signer, p)
					}
				}
				return
			}
			if a.Outcome != outbound.Retry {
				t.Fatalf("attempt %+v, want a retry", a)
			}
			for _, p := range append([]string{"not delivered"}, tc.phrases...) {
				if !contains(a.Reason, p) {
					t.Errorf("reason %q lacks %q", a.Reason, p)
				}
			}
		})
	}
}

// Our own endpoint as the BDEW partner: its receipts to a bdew partner
// carry the signer as an X509PKIPathv1 token, so that a sender under
// trust: ca (nothing listed) verifies them through the CA policy:
// delivered when the policy accepts the brainpool certificate (the CRL
// says good), retried naming it when the policy's CA is another.
func TestAS4BDEWCATrustOurReceiver(t *testing.T) {
	pki := bptest.New(t)
	gw, us := pki.Party("9900000000001"), pki.Party("9900000000002")
	other := bptest.New(t)
	now := time.Now()
	crls := trusttest.ServeFiles(t)
	crls.Set("/bdew.crl", bptest.CRL(t, pki.CA, now.Add(-time.Hour), now.Add(time.Hour)))
	pdir := t.TempDir()
	for name, file := range map[string]string{"us.pem": us.Signing.CertFile, "us-tls.pem": us.TLS.CertFile} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pdir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	yaml := "id: lieferant\nas4:\n  profile: bdew\n  party_id: \"" + us.ID + "\"\n  certificates: [us.pem]\n  tls_certificates: [us-tls.pem]\n" +
		"  pmodes:\n    - id: mp\n      agreement: " + partners.BDEWAgreement + "\n"
	if err := os.WriteFile(filepath.Join(pdir, "lieferant.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := partners.Load(pdir)
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int64
	pl := &exchange.Pipeline{Store: dedup.NewMemoryStore(dedup.Options{Lease: time.Minute}), Log: slog.New(slog.DiscardHandler),
		Handler: exchange.HandlerFunc(func(ctx context.Context, m *exchange.Message) error { handled.Add(1); return nil })}
	ep, err := endpoint.New(endpoint.Config{Partners: d, Pipeline: pl, Log: slog.New(slog.DiscardHandler),
		Keys:    []xmlenc.KeyPair{{Cert: gw.Signing.Cert, Key: gw.Signing.Key}, {Cert: gw.Encrypt.Cert, Key: gw.Encrypt.Key}},
		PartyID: gw.ID, PartyType: partners.PartyTypeGLN,
		ClientCertHeader: "X-SSL-Client-Cert", TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var answer []byte
	// A TLS-terminating proxy forwards our TLS client certificate (Go's
	// TLS has no brainpool) and keeps the receipt.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("X-SSL-Client-Cert", base64.StdEncoding.EncodeToString(us.TLS.Cert.Raw))
		rec := httptest.NewRecorder()
		ep.ServeHTTP(rec, r)
		mu.Lock()
		answer = rec.Body.Bytes()
		mu.Unlock()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(srv.Close)

	var root *x509.Certificate
	id := transmit.Identity{PartyID: us.ID, PartyType: partners.PartyTypeGLN, Cert: us.Signing.Cert, Key: us.Signing.Key}
	tr := transmit.NewAS4(func(string) (transmit.Identity, error) { return id, nil }, func(string) (*transmit.AS4Settings, error) {
		return &transmit.AS4Settings{URL: srv.URL, To: as4.PartyID{Value: gw.ID, Type: partners.PartyTypeGLN},
			AgreementRef: partners.BDEWAgreement, Service: "https://www.bdew.de/as4/communication/services/MP",
			Action: "http://docs.oasis-open.org/ebxml-msg/as4/200902/action", Profile: transmit.ProfileBDEW,
			EncryptTo: gw.Encrypt.Cert, ReceiptRequired: true,
			CA: &transmit.CATrust{Checker: &trust.Checker{}, Policy: &trust.CAPolicy{Roots: []*x509.Certificate{root},
				Subject: "CN=9900000000001.*", Revocation: trust.Revocation{Mode: trust.ModeCRL, CRLURLs: []string{crls.URL + "/bdew.crl"}}}}}, nil
	}, t.TempDir())

	root = pki.CA.Cert
	m := &outbound.Message{Partner: "stadtwerke", Protocol: outbound.AS4, MessageID: "bdew-ca-1@" + us.ID, ContentType: "application/edifact"}
	a := attempt(t, tr, m, []byte(edi))
	if a.Outcome != outbound.Deliver || a.Evidence == nil || a.Evidence.Kind != "receipt" ||
		!contains(a.Evidence.Signer, "9900000000001.sig") || !contains(a.Evidence.Signer, "trust: ca trusted/good from crl") {
		t.Fatalf("attempt %+v evidence %+v, want delivered on the receipt through the CA policy", a, a.Evidence)
	}
	mu.Lock()
	got := string(answer)
	mu.Unlock()
	if !strings.Contains(got, wssec.ValueTypeX509PKIPathv1) || handled.Load() != 1 {
		t.Fatalf("the receipt has no X509PKIPathv1 token (handled %d): %s", handled.Load(), got)
	}

	root = other.CA.Cert
	m = &outbound.Message{Partner: "stadtwerke", Protocol: outbound.AS4, MessageID: "bdew-ca-2@" + us.ID, ContentType: "application/edifact"}
	a = attempt(t, tr, m, []byte(edi))
	if a.Outcome != outbound.Retry || !contains(a.Reason, "refused/untrusted") || !contains(a.Reason, "9900000000001.sig") ||
		!contains(a.Reason, "does not chain to a configured CA") {
		t.Fatalf("attempt %+v, want a retry naming the certificate and the decision", a)
	}
}

package endpoint_test

import (
	"context"
	"crypto/x509"
	"encoding/asn1"
	"encoding/base64"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/as4"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/internal/trust/trusttest"
	"github.com/edigateway/gateway/internal/wssec"
)

// trust: ca AS4 partners: the signer (BinarySecurityToken) chains to the
// partner's CA, with the intermediate configured or sent as an
// X509PKIPathv1 token, matches certificate_subject or, with
// party_id_is_cn, has the eb:From PartyId as its CN, and is checked for
// revocation by OCSP (a real openssl ocsp responder) or CRL (served on
// loopback) under hard and soft policies. Refusals are EBMS:0101 naming the
// certificate and its status; every decision is audited.
func TestCATrustAndRevocation(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	root := trusttest.NewRoot(t, "Globex Root CA")
	ica := root.NewIntermediate(t, "Globex Issuing CA")
	crls := trusttest.ServeFiles(t)
	crlURL := crls.URL + "/ica.crl"
	leaf := func(cn string) trusttest.Issued {
		return ica.Issue(t, trusttest.Leaf{CommonName: cn, Organization: []string{"Globex Corp"}, CRL: crlURL})
	}
	good := leaf("AS4 GLOBEX Prod")
	renewed := leaf("AS4 GLOBEX Prod 2027")
	revoked := leaf("AS4 GLOBEX Old")
	wrongName := leaf("AS4 Initech")
	apCert := leaf("PGLOBEX000001")
	other := trusttest.NewRoot(t, "Other Root CA")
	unknownCA := other.Issue(t, trusttest.Leaf{CommonName: "AS4 GLOBEX Prod", Organization: []string{"Globex Corp"}})
	now := time.Now()
	crls.Set("/ica.crl", ica.CRL(t, now.Add(-time.Hour), now.Add(time.Hour), revoked.Cert))
	responder := ica.StartOCSP(t, nil, 60, revoked.Cert)
	down := trusttest.DownURL(t)

	dir := t.TempDir()
	rootPEM, icaPEM := filepath.Join(dir, "root.pem"), filepath.Join(dir, "ica.pem")
	writePEM(t, rootPEM, root.Cert)
	writePEM(t, icaPEM, ica.Cert)
	const ptype = "urn:oasis:names:tc:ebcore:partyid-type:unregistered"
	partner := func(id, party, extra string) string {
		return fmt.Sprintf(`id: %s
as4:
  party_id: %s
  party_type: %s
  trust: ca
  ca_certificates: [%s]
%s  pmodes:
    - id: invoice
      service: %s
      action: %s
`, id, party, ptype, rootPEM, extra, testService, testAction)
	}
	subject := "  certificate_subject: \"CN=AS4 GLOBEX*,O=Globex*\"\n"
	inter := "  intermediates: [" + icaPEM + "]\n"
	files := defaultPartners(t, k)
	files["globex.yaml"] = partner("globex", "urn:globex", subject)
	files["globex-ocsp.yaml"] = partner("globex-ocsp", "urn:globex:ocsp", subject+inter+"  revocation: {mode: ocsp, ocsp_responder: \""+responder.URL+"\"}\n")
	files["globex-crl.yaml"] = partner("globex-crl", "urn:globex:crl", subject+inter+"  revocation: {mode: crl}\n")
	// No responder named anywhere: undetermined for good (responders that
	// are down are temporary: TestRevocationUnavailableIsRetriedNotRefused).
	files["globex-hard.yaml"] = partner("globex-hard", "urn:globex:hard", subject+inter+"  revocation: {mode: ocsp, policy: hard}\n")
	files["globex-soft.yaml"] = partner("globex-soft", "urn:globex:soft", subject+inter+"  revocation: {mode: ocsp, policy: soft, ocsp_responder: \""+down+"\"}\n")
	files["globex-ap.yaml"] = partner("globex-ap", "PGLOBEX000001", inter+"  party_id_is_cn: true\n")
	files["globex-ap2.yaml"] = partner("globex-ap2", "PGLOBEX000002", inter+"  party_id_is_cn: true\n")
	h := newHarness(t, harnessOptions{partnerYAML: files})

	for i, tc := range []struct {
		name, party string
		signer      trusttest.Issued
		sendChain   bool // the intermediate as an X509PKIPathv1 token
		ok          bool
		text        []string
		decision    string
	}{
		{name: "good, intermediate sent", party: "urn:globex", signer: good, sendChain: true, ok: true, decision: "trusted/not-checked"},
		{name: "renewed certificate", party: "urn:globex", signer: renewed, sendChain: true, ok: true, decision: "trusted/not-checked"},
		{name: "intermediate not sent", party: "urn:globex", signer: good, text: []string{"AS4 GLOBEX Prod", "does not chain to a configured CA"}, decision: "refused/untrusted"},
		{name: "unknown CA", party: "urn:globex", signer: unknownCA, sendChain: true, text: []string{"AS4 GLOBEX Prod", `issuer "CN=Other Root CA`, "does not chain"}, decision: "refused/untrusted"},
		{name: "wrong name", party: "urn:globex", signer: wrongName, sendChain: true, text: []string{"AS4 Initech", "does not match"}, decision: "refused/untrusted"},
		{name: "party id is cn", party: "PGLOBEX000001", signer: apCert, ok: true, decision: "trusted/not-checked"},
		{name: "party id is not cn", party: "PGLOBEX000002", signer: apCert, text: []string{`"PGLOBEX000001"`, `not the eb:From PartyId "PGLOBEX000002"`}, decision: "refused/untrusted"},
		{name: "ocsp good", party: "urn:globex:ocsp", signer: good, ok: true, decision: "trusted/good"},
		{name: "ocsp revoked", party: "urn:globex:ocsp", signer: revoked, text: []string{"AS4 GLOBEX Old", "is revoked", "ocsp " + responder.URL}, decision: "refused/revoked"},
		{name: "crl good", party: "urn:globex:crl", signer: good, ok: true, decision: "trusted/good"},
		{name: "crl revoked", party: "urn:globex:crl", signer: revoked, text: []string{"AS4 GLOBEX Old", "is revoked", "crl " + crlURL}, decision: "refused/revoked"},
		{name: "no responder, hard", party: "urn:globex:hard", signer: renewed, text: []string{"AS4 GLOBEX Prod 2027", "revocation status", "could not be determined"}, decision: "refused/undetermined"},
		{name: "responder down, soft", party: "urn:globex:soft", signer: renewed, ok: true, decision: "trusted/undetermined-soft"},
	} {
		c := rsaClient(k)
		c.Signer, c.Certificate = tc.signer.Key, tc.signer.Cert
		m := testMessage(fmt.Sprintf("trust-%d@globex.test", i))
		m.From = as4.PartyID{Value: tc.party, Type: ptype}
		out, err := c.Build(m)
		if err != nil {
			t.Fatal(err)
		}
		if tc.sendChain {
			mm := splitMIME(t, out)
			mm.editSOAP(t, func(doc *etree.Document) { addPKIPath(t, doc, ica.Cert) })
			out = mm.join(t, out)
		}
		resp, err := c.Post(context.Background(), h.url, out)
		if tc.ok {
			if err != nil {
				t.Errorf("%s: refused: %v", tc.name, err)
			}
		} else {
			if err == nil {
				t.Errorf("%s: accepted", tc.name)
				continue
			}
			refusal(t, h, resp, as4.CodeFailedAuthentication, tc.text...)
		}
		recs, err := h.store.Audit().Query(context.Background(), audit.Query{MessageID: m.MessageID})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range recs {
			if r.Step == audit.StepTrust {
				got = append(got, r.Decision)
				if !strings.Contains(r.Error, tc.signer.Cert.Subject.CommonName) {
					t.Errorf("%s: trust audit detail does not name the certificate: %s", tc.name, r.Error)
				}
			}
		}
		if len(got) != 1 || got[0] != tc.decision {
			t.Errorf("%s: trust audit decisions %q, want [%s]", tc.name, got, tc.decision)
		}
	}
	if n := len(h.handler.delivered()); n != 6 {
		t.Errorf("handler got %d messages, want the 6 accepted", n)
	}
}

// addPKIPath adds a wsse:BinarySecurityToken X509PKIPathv1 with certs to
// the security header (not covered by the signature).
func addPKIPath(t *testing.T, doc *etree.Document, certs ...*x509.Certificate) {
	t.Helper()
	var raws []asn1.RawValue
	for _, c := range certs {
		raws = append(raws, asn1.RawValue{FullBytes: c.Raw})
	}
	der, err := asn1.Marshal(raws)
	if err != nil {
		t.Fatal(err)
	}
	sec := find(doc.Root(), wssec.NamespaceWSSE, "Security")
	bst := sec.CreateElement(sec.Space + ":BinarySecurityToken")
	bst.CreateAttr("EncodingType", wssec.EncodingBase64Binary)
	bst.CreateAttr("ValueType", wssec.ValueTypeX509PKIPathv1)
	bst.SetText(base64.StdEncoding.EncodeToString(der))
}

// Issue 22 item 19: under revocation policy hard, a revocation status that
// cannot be had right now (the OCSP responder is down) is a temporary
// failure: 503 with Retry-After and no eb:Error (AS4 senders do not retry
// an EBMS:0101 failure), audited "unavailable", nothing delivered and
// nothing claimed, so that the sender's retransmission, once the responder
// is back, is processed. A revoked certificate stays a permanent refusal
// (TestCATrustAndRevocation).
func TestRevocationUnavailableIsRetriedNotRefused(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	root := trusttest.NewRoot(t, "Hooli Root CA")
	url := trusttest.DownURL(t) // the responder is down until started below
	signer := root.Issue(t, trusttest.Leaf{CommonName: "AS4 HOOLI Prod", Organization: []string{"Hooli"}})
	rootPEM := filepath.Join(t.TempDir(), "root.pem")
	writePEM(t, rootPEM, root.Cert)
	const ptype = "urn:oasis:names:tc:ebcore:partyid-type:unregistered"
	files := defaultPartners(t, k)
	files["hooli.yaml"] = fmt.Sprintf(`id: hooli
as4:
  party_id: urn:hooli
  party_type: %s
  trust: ca
  ca_certificates: [%s]
  revocation: {mode: ocsp, policy: hard, ocsp_responder: "%s"}
  pmodes:
    - id: invoice
      service: %s
      action: %s
`, ptype, rootPEM, url, testService, testAction)
	h := newHarness(t, harnessOptions{partnerYAML: files})
	c := rsaClient(k)
	c.Signer, c.Certificate = signer.Key, signer.Cert
	m := testMessage("revocation-unavailable@hooli.test")
	m.From = as4.PartyID{Value: "urn:hooli", Type: ptype}
	out, err := c.Build(m)
	if err != nil {
		t.Fatal(err)
	}
	trustAudit := func() []string {
		recs, err := h.store.Audit().Query(context.Background(), audit.Query{MessageID: m.MessageID})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range recs {
			if r.Step == audit.StepTrust || r.Step == audit.StepReply {
				got = append(got, string(r.Step)+":"+r.Decision+":"+r.Disposition)
			}
		}
		return got
	}

	resp, err := c.Post(context.Background(), h.url, out)
	if err == nil || resp == nil || resp.Status != http.StatusServiceUnavailable || resp.RetryAfter != "60" {
		status, retry := 0, ""
		if resp != nil {
			status, retry = resp.Status, resp.RetryAfter
		}
		t.Fatalf("responder down: HTTP %d Retry-After %q (%v), want HTTP 503 with Retry-After 60", status, retry, err)
	}
	if strings.Contains(resp.ContentType, "xml") || strings.Contains(string(resp.Body), "eb:Error") {
		t.Fatalf("responder down: an error signal was sent: %s", resp.Body)
	}
	for _, w := range []string{`"CN=AS4 HOOLI Prod,O=Hooli"`, "serial " + trust.Serial(signer.Cert), "cannot be checked right now", "incident GW-", "retry later"} {
		if !strings.Contains(string(resp.Body), w) {
			t.Errorf("503 body lacks %q: %s", w, resp.Body)
		}
	}
	if strings.Contains(string(resp.Body), "connection refused") {
		t.Errorf("503 body tells the partner the internal cause: %s", resp.Body)
	}
	if n := h.handler.count(); n != 0 {
		t.Fatalf("handler ran %d times for a message whose signer could not be checked", n)
	}
	if got, want := trustAudit(), []string{"trust:unavailable/undetermined:", "reply:unavailable:http-503"}; !slices.Equal(got, want) {
		t.Fatalf("audit %q, want %q", got, want)
	}

	root.StartOCSPAt(t, nil, url, 60)
	if _, err := c.Post(context.Background(), h.url, out); err != nil { // the sender's retransmission
		t.Fatalf("retransmission: %v", err)
	}
	if n := len(h.handler.delivered()); n != 1 {
		t.Fatalf("retransmission: delivered %d times, want 1", n)
	}
	got := trustAudit()
	if len(got) < 3 || got[2] != "trust:trusted/good:" {
		t.Fatalf("audit %q: the retransmission is not trusted/good", got)
	}
}

package endpoint_test

import (
	"context"
	"crypto/x509"
	"encoding/asn1"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/as4"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/trust/trusttest"
	"github.com/edigateway/gateway/wssec"
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
	files["globex-hard.yaml"] = partner("globex-hard", "urn:globex:hard", subject+inter+"  revocation: {mode: both, policy: hard, ocsp_responder: \""+down+"\", crl_urls: [\""+down+"ica.crl\"]}\n")
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
		{name: "responders down, hard", party: "urn:globex:hard", signer: renewed, text: []string{"AS4 GLOBEX Prod 2027", "revocation status", "could not be determined"}, decision: "refused/undetermined"},
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

package as2

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/internal/testpki"
	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/internal/trust/trusttest"
	"github.com/edigateway/gateway/mdn"
)

// trust: ca partners: the signer chains to the partner's CA (intermediate
// sent in the CMS certificates), matches certificate_subject, and is
// checked for revocation by OCSP (a real openssl ocsp responder) or CRL
// (served on loopback) under hard and soft policies. Every refusal is
// authentication-failed naming the certificate and its status, every
// decision is audited, and nothing refused reaches the handler.
func TestCATrustAndRevocation(t *testing.T) {
	t.Parallel()
	getKeys(t)
	root := trusttest.NewRoot(t, "Globex Root CA")
	ica := root.NewIntermediate(t, "Globex Issuing CA")
	crls := trusttest.ServeFiles(t)
	crlURL := crls.URL + "/ica.crl"
	leaf := func(cn string) trusttest.Issued {
		return ica.Issue(t, trusttest.Leaf{CommonName: cn, Organization: []string{"Globex Corp"}, CRL: crlURL})
	}
	good := leaf("AS2 GLOBEX Prod")
	renewed := leaf("AS2 GLOBEX Prod 2027") // a new certificate: no configuration change
	revoked := leaf("AS2 GLOBEX Old")
	wrongName := leaf("AS2 Initech")
	other := trusttest.NewRoot(t, "Other Root CA")
	unknownCA := other.Issue(t, trusttest.Leaf{CommonName: "AS2 GLOBEX Prod", Organization: []string{"Globex Corp"}})
	now := time.Now()
	crls.Set("/ica.crl", ica.CRL(t, now.Add(-time.Hour), now.Add(time.Hour), revoked.Cert))
	responder := ica.StartOCSP(t, nil, 60, revoked.Cert)
	down := trusttest.DownURL(t)

	partner := func(id, as2id, rev string) string {
		return fmt.Sprintf("id: %s\nas2:\n  as2_id: %s\n  trust: ca\n  ca_certificates: [globex-root.pem]\n  certificate_subject: \"CN=AS2 GLOBEX*,O=Globex*\"\n  require_signature: true\n%s", id, as2id, rev)
	}
	e := newEnv(t, envOptions{
		files: map[string][]byte{"globex-root.pem": testpki.CertPEM(root.Cert)},
		extraPartners: map[string]string{
			"globex.yaml":      partner("globex", "GLOBEX", ""),
			"globex-ocsp.yaml": partner("globex-ocsp", "GLOBEX-OCSP", "  revocation: {mode: ocsp, ocsp_responder: \""+responder.URL+"\"}\n"),
			"globex-crl.yaml":  partner("globex-crl", "GLOBEX-CRL", "  revocation: {mode: crl, policy: hard}\n"),
			// No responder named anywhere: undetermined for good (a responder that
			// is down is temporary: TestRevocationUnavailableIsRetriedNotRefused).
			"globex-hard.yaml": partner("globex-hard", "GLOBEX-HARD", "  revocation: {mode: ocsp, policy: hard}\n"),
			"globex-soft.yaml": partner("globex-soft", "GLOBEX-SOFT", "  revocation: {mode: ocsp, policy: soft, ocsp_responder: \""+down+"\"}\n"),
		},
	})

	for i, tc := range []struct {
		name, from string
		signer     trusttest.Issued
		noChain    bool
		want       mdn.Disposition
		text       []string // in the MDN's reason
		decision   string   // of the trust audit record
	}{
		{name: "good", from: "GLOBEX", signer: good, want: mdn.DispProcessed, decision: "trusted/not-checked"},
		{name: "renewed certificate", from: "GLOBEX", signer: renewed, want: mdn.DispProcessed, decision: "trusted/not-checked"},
		{name: "intermediate not sent", from: "GLOBEX", signer: good, noChain: true, want: mdn.DispAuthenticationFailed,
			text: []string{`"CN=AS2 GLOBEX Prod,O=Globex Corp"`, "does not chain to a configured CA"}, decision: "refused/untrusted"},
		{name: "unknown CA", from: "GLOBEX", signer: unknownCA, want: mdn.DispAuthenticationFailed,
			text: []string{"AS2 GLOBEX Prod", `issuer "CN=Other Root CA`, "does not chain to a configured CA"}, decision: "refused/untrusted"},
		{name: "wrong name", from: "GLOBEX", signer: wrongName, want: mdn.DispAuthenticationFailed,
			text: []string{"AS2 Initech", "does not match"}, decision: "refused/untrusted"},
		{name: "ocsp good", from: "GLOBEX-OCSP", signer: good, want: mdn.DispProcessed, decision: "trusted/good"},
		{name: "ocsp revoked", from: "GLOBEX-OCSP", signer: revoked, want: mdn.DispAuthenticationFailed,
			text: []string{"AS2 GLOBEX Old", "is revoked", "ocsp " + responder.URL}, decision: "refused/revoked"},
		{name: "crl good", from: "GLOBEX-CRL", signer: good, want: mdn.DispProcessed, decision: "trusted/good"},
		{name: "crl revoked", from: "GLOBEX-CRL", signer: revoked, want: mdn.DispAuthenticationFailed,
			text: []string{"AS2 GLOBEX Old", "is revoked", "crl " + crlURL}, decision: "refused/revoked"},
		// (renewed: good's OCSP answer is cached until its nextUpdate.)
		{name: "no responder, hard", from: "GLOBEX-HARD", signer: renewed, want: mdn.DispAuthenticationFailed,
			text: []string{"AS2 GLOBEX Prod 2027", "revocation status", "could not be determined"}, decision: "refused/undetermined"},
		{name: "responder down, soft", from: "GLOBEX-SOFT", signer: renewed, want: mdn.DispProcessed, decision: "trusted/undetermined-soft"},
	} {
		cl := e.client()
		cl.From, cl.SignCert, cl.SignKey = tc.from, tc.signer.Cert, tc.signer.Key
		if !tc.noChain {
			cl.SignChain = append(cl.SignChain, ica.Cert)
		}
		m := prepare(t, cl, fmt.Sprintf("ISA*00*          *00*          *ZZ*GLOBEX*ZZ*GATEWAY*%d~", i))
		resp, body := e.post(t, m.Header, m.Body)
		p := expectMDN(t, resp, body, tc.want)
		reason, _, _ := strings.Cut(p.Report.HumanText, "Incident")
		for _, w := range tc.text {
			if !strings.Contains(reason, w) {
				t.Errorf("%s: reason lacks %q: %s", tc.name, w, p.Report.HumanText)
			}
		}
		wantRuns := 0
		if tc.want == mdn.DispProcessed {
			wantRuns = 1
		}
		if n := e.handler.count(m.ID); n != wantRuns {
			t.Errorf("%s: handler ran %d times, want %d", tc.name, n, wantRuns)
		}
		var got []string
		for _, r := range e.auditFor(t, tc.from, m.ID) {
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
}

// Issue 22 item 19: under revocation policy hard, a revocation status that
// cannot be had right now (the OCSP responder is down) is a temporary
// failure: 503 with Retry-After and no MDN, audited "unavailable", nothing
// handed to the handler and nothing claimed, so that the sender's
// retransmission, once the responder is back, is processed. A revoked
// certificate stays a permanent refusal (TestCATrustAndRevocation).
func TestRevocationUnavailableIsRetriedNotRefused(t *testing.T) {
	t.Parallel()
	getKeys(t)
	root := trusttest.NewRoot(t, "Hooli Root CA")
	url := trusttest.DownURL(t) // the responder is down until started below
	signer := root.Issue(t, trusttest.Leaf{CommonName: "AS2 HOOLI Prod", Organization: []string{"Hooli"}})
	e := newEnv(t, envOptions{
		files: map[string][]byte{"hooli-root.pem": testpki.CertPEM(root.Cert)},
		extraPartners: map[string]string{"hooli.yaml": "id: hooli\nas2:\n  as2_id: HOOLI\n  trust: ca\n  ca_certificates: [hooli-root.pem]\n" +
			"  require_signature: true\n  revocation: {mode: ocsp, policy: hard, ocsp_responder: \"" + url + "\"}\n"},
	})
	cl := e.client()
	cl.From, cl.SignCert, cl.SignKey = "HOOLI", signer.Cert, signer.Key
	m := prepare(t, cl, "ISA*00*          *00*          *ZZ*HOOLI*ZZ*GATEWAY*1~")

	resp, body := e.post(t, m.Header, m.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "60" {
		t.Fatalf("responder down: HTTP %d Retry-After %q, want 503 with Retry-After 60: %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if ct := resp.Header.Get("Content-Type"); strings.Contains(ct, "multipart") {
		t.Fatalf("responder down: an MDN was sent (%s)", ct)
	}
	for _, w := range []string{`"CN=AS2 HOOLI Prod,O=Hooli"`, "serial " + trust.Serial(signer.Cert), "cannot be checked right now", "incident GW-", "retry later"} {
		if !strings.Contains(string(body), w) {
			t.Errorf("503 body lacks %q: %s", w, body)
		}
	}
	if strings.Contains(string(body), "connection refused") {
		t.Errorf("503 body tells the partner the internal cause: %s", body)
	}
	if n := e.handler.count(m.ID); n != 0 {
		t.Fatalf("handler ran %d times for a message whose signer could not be checked", n)
	}
	var got []string
	for _, r := range e.auditFor(t, "HOOLI", m.ID) {
		got = append(got, string(r.Step)+":"+r.Decision+":"+r.Disposition)
	}
	if want := []string{"trust:unavailable/undetermined:", "reply:unavailable:http-503"}; !slices.Equal(got, want) {
		t.Fatalf("audit %q, want %q", got, want)
	}

	root.StartOCSPAt(t, nil, url, 60)
	resp, body = e.post(t, m.Header, m.Body) // the sender's retransmission
	expectMDN(t, resp, body, mdn.DispProcessed)
	if n := e.handler.count(m.ID); n != 1 {
		t.Fatalf("retransmission: handler ran %d times, want 1", n)
	}
	got = nil
	for _, r := range e.auditFor(t, "HOOLI", m.ID) {
		if r.Step == audit.StepTrust {
			got = append(got, r.Decision)
		}
	}
	if want := []string{"unavailable/undetermined", "trusted/good"}; !slices.Equal(got, want) {
		t.Fatalf("trust audit %q, want %q", got, want)
	}
}

package server

import (
	"bytes"
	"context"
	"crypto"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/as4/endpoint"
	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/internal/cms"
)

// demoGatewayKeys is the gateway's own demo key pair: a signature with it
// is not the demo partner's.
func demoGatewayKeys(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	demo := filepath.Join(filepath.Dir(file), "..", "testdata", "fixture")
	certPEM, err := os.ReadFile(filepath.Join(demo, "keys", "gateway.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if keyPEM, err = os.ReadFile(filepath.Join(demo, "keys", "gateway.key")); err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM
}

// sendAS2Refused sends payload under id with client c and returns the
// HTTP status and the MDN's disposition (empty when none could be read).
func sendAS2Refused(t *testing.T, c *as2client.Client, id string, payload []byte) (int, string) {
	t.Helper()
	m, err := c.Prepare(payload, "application/edifact", "invoice.edi")
	if err != nil {
		t.Fatal(err)
	}
	m.ID = "<" + id + ">"
	m.Header.Set("Message-Id", m.ID)
	res, err := c.Send(context.Background(), m)
	if res == nil {
		t.Fatalf("AS2 send of %s: %v", id, err)
	}
	if res.MDN == nil {
		return res.Status, ""
	}
	return res.Status, res.MDN.Disposition.String()
}

// postAS4Refused posts an AS4 message that must not be answered with a
// receipt, and returns the answer.
func postAS4Refused(t *testing.T, f *consoleFixture, c *client.Client, from, id string) string {
	t.Helper()
	out, err := c.Build(&client.Message{
		MessageID: id,
		From:      as4.PartyID{Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered", Value: from},
		To:        as4.PartyID{Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered", Value: "urn:demo:gateway"},
		Service:   "urn:demo:invoicing", Action: "Deliver",
		Payloads: []client.Payload{{MimeType: "application/edifact", Data: edifact("REF900", "INV-900")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(f.partner+"/as4", out.ContentType, bytes.NewReader(out.Body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), "Receipt") || !strings.Contains(string(b), "Error") {
		t.Fatalf("AS4 %s: HTTP %d %.500q, want an ebMS error", id, resp.StatusCode, b)
	}
	return string(b)
}

var incidentLink = regexp.MustCompile(`href="/console/message\?incident=(GW-[0-9A-Za-z]+)"`)

// TestConsoleShowsRefusals: messages the AS2 and AS4 endpoints refuse
// before the pipeline (a signature by another key from a known partner;
// a sender no agreement matches) have only a reply record with decision
// "rejected". The console counts them as rejected: the search by outcome
// finds them, the dashboard lists and counts them among what needs
// attention and the chart draws them in the rejected colour; an unknown
// sender shows as what it claimed to be (AS2-From, eb:From PartyId) in the
// partner column, is searchable by it, and has a detail page (the AS4 one,
// which has no transport key, by its incident reference).
func TestConsoleShowsRefusals(t *testing.T) {
	f := newConsoleFixture(t)
	certPEM, keyPEM := demoGatewayKeys(t)
	gw, err := cms.ParseKeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	// AS2: the demo partner's AS2-From, signed with a key not its own.
	badSig := *f.as2
	badSig.SignCert, badSig.SignKey = gw.Cert, gw.Key
	if _, disp := sendAS2Refused(t, &badSig, "badsig-as2@demo", edifact("REF901", "INV-901")); disp != "" && !strings.Contains(disp, "error") && !strings.Contains(disp, "failed") {
		t.Fatalf("AS2 signed by another key: %q", disp)
	}
	// AS2: an AS2-From no agreement has.
	stranger := *f.as2
	stranger.From = "STRANGER-AS2"
	if _, disp := sendAS2Refused(t, &stranger, "stranger-as2@x", edifact("REF902", "INV-902")); disp != "" && !strings.Contains(disp, "unknown-trading-partner") && !strings.Contains(disp, "error") {
		t.Fatalf("AS2 from an unknown AS2-From: %q", disp)
	}
	// AS4: the demo partner's PartyId signed with another key, and an
	// unknown PartyId.
	kp, err := endpoint.ParseKeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	postAS4Refused(t, f, &client.Client{Signer: kp.Key.(crypto.Signer), Certificate: kp.Cert, Host: "demo.test"}, "urn:demo:partner", "badsig-as4@demo.test")
	postAS4Refused(t, f, demoAS4Client(t), "urn:stranger:as4", "stranger-as4@x.test")
	ids := []string{"badsig-as2@demo", "stranger-as2@x", "badsig-as4@demo.test", "stranger-as4@x.test"}

	// Each is one audit record: reply / rejected.
	recs, err := f.s.Backend.AuditSink().(audit.Reader).Query(context.Background(), audit.Query{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		n := 0
		for _, r := range recs {
			if r.MessageID == id {
				n++
				if r.Step != audit.StepReply || r.Decision != "rejected" {
					t.Errorf("%s: record %s/%s, want reply/rejected", id, r.Step, r.Decision)
				}
			}
		}
		if n != 1 {
			t.Errorf("%s: %d audit records, want 1", id, n)
		}
	}

	code, page := get(t, f.admin+"/console/messages?decision=rejected", consoleToken)
	if code != 200 || !strings.Contains(page, "4 message(s)") {
		t.Errorf("search by outcome rejected: %d, want 4 messages: %.3000s", code, page)
	}
	for _, id := range ids {
		if !strings.Contains(page, id) {
			t.Errorf("search by outcome rejected lacks %s", id)
		}
	}
	if strings.Contains(page, "o-pending") {
		t.Errorf("a refusal shows as pending")
	}
	// The partner column shows what the unknown senders claimed.
	for _, claimed := range []string{"STRANGER-AS2", "urn:stranger:as4"} {
		if !strings.Contains(strings.ToLower(page), strings.ToLower(`class="claimed" href="/console/messages?partner=`+url.QueryEscape(claimed)+`">`+claimed+`</a>`)) {
			t.Errorf("partner column lacks the claimed sender %s", claimed)
		}
	}

	// Searchable by the claimed sender: that refusal only.
	for claimed, id := range map[string]string{"STRANGER-AS2": "stranger-as2@x", "urn:stranger:as4": "stranger-as4@x.test", "stranger-as2": "stranger-as2@x"} {
		code, page := get(t, f.admin+"/console/messages?partner="+url.QueryEscape(claimed), consoleToken)
		if code != 200 || !strings.Contains(page, "1 message(s)") || !strings.Contains(page, id) {
			t.Errorf("search by partner %s: %d %.2000s", claimed, code, page)
		}
	}

	// The dashboard lists and counts them; the chart draws them rejected.
	code, page = get(t, f.admin+"/console/", consoleToken)
	if code != 200 {
		t.Fatalf("dashboard: %d", code)
	}
	attention := page[strings.Index(page, "needing attention</h2>"):]
	for _, id := range ids {
		if !strings.Contains(attention, id) {
			t.Errorf("dashboard's attention list lacks %s", id)
		}
	}
	if m := regexp.MustCompile(`id="attention-count">(\d+)<`).FindStringSubmatch(page); m == nil || m[1] != "4" {
		t.Errorf("attention count %v, want 4", m)
	}
	for _, proto := range []string{"as2", "as4"} {
		if !regexp.MustCompile(`fill="#c62828"><title>` + proto + ` \d\d:00 rejected: 2</title>`).MatchString(page) {
			t.Errorf("chart has no rejected bar of 2 for %s", proto)
		}
	}

	// Detail pages: the AS2 refusal by its key, the AS4 unknown-party
	// refusal (no key) by its incident.
	_, page = get(t, f.admin+"/console/messages?partner=urn:stranger:as4", consoleToken)
	m := incidentLink.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no detail link for the AS4 refusal from an unknown party: %.3000s", page)
	}
	code, page = get(t, f.admin+"/console/message?incident="+m[1], consoleToken)
	for _, want := range []string{"stranger-as4@x.test", "urn:stranger:as4", "no trading partner agreement", m[1], "o-rejected"} {
		if code != 200 || !strings.Contains(page, want) {
			t.Errorf("AS4 refusal detail: %d, lacks %q: %.3000s", code, want, page)
		}
	}
	_, page = get(t, f.admin+"/console/messages?partner=STRANGER-AS2", consoleToken)
	k := regexp.MustCompile(`href="/console/message\?key=([0-9a-f]{64})"`).FindStringSubmatch(page)
	if k == nil {
		t.Fatalf("no detail link for the AS2 refusal from an unknown partner")
	}
	code, page = get(t, f.admin+"/console/message?key="+k[1], consoleToken)
	for _, want := range []string{"stranger-as2@x", "STRANGER-AS2", "o-rejected"} {
		if code != 200 || !strings.Contains(page, want) {
			t.Errorf("AS2 refusal detail: %d, lacks %q", code, want)
		}
	}
}

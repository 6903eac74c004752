package transmit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/internal/testpki"
	"github.com/edigateway/gateway/internal/transmit"
	"github.com/edigateway/gateway/outbound"
)

const unregistered = "urn:oasis:names:tc:ebcore:partyid-type:unregistered"

// as4To returns a Transmitter sending to url as the fixture gateway's
// partner demo (its P-Mode demo-invoice), encrypted for the gateway and
// requiring its signed receipt, with s tuned by tune.
func as4To(t testing.TB, url string, tune func(s *transmit.AS4Settings)) *transmit.AS4 {
	return as4ToIn(t, url, t.TempDir(), tune)
}

// as4ToIn is as4To building its messages in spool.
func as4ToIn(t testing.TB, url, spool string, tune func(s *transmit.AS4Settings)) *transmit.AS4 {
	gw := theirs(t)
	return transmit.NewAS4(identity(t), func(partner string) (*transmit.AS4Settings, error) {
		if partner != "gw" {
			return nil, fmt.Errorf("no partner %q", partner)
		}
		s := &transmit.AS4Settings{URL: url, To: as4.PartyID{Value: "urn:demo:gateway", Type: unregistered},
			Service: "urn:demo:invoicing", Action: "Deliver", ReceiptSigners: certs(gw.Cert), EncryptTo: gw.Cert,
			Compress: true, ReceiptRequired: true}
		if tune != nil {
			tune(s)
		}
		return s, nil
	}, spool)
}

func as4Message(t testing.TB) *outbound.Message {
	id, err := transmit.NewMessageID(outbound.AS4, demo(t))
	if err != nil {
		t.Fatal(err)
	}
	return &outbound.Message{ID: "q1", Partner: "gw", Protocol: outbound.AS4, MessageID: id, ContentType: "application/edifact"}
}

// A signed, encrypted, compressed message to the served gateway is
// delivered on its signed receipt. Sent again under the same eb:MessageId
// (a retry whose receipt was lost: rebuilt, so new references), the
// gateway answers with its earlier receipt, which covers the first
// transmission in m.Sent: delivered, and the handler ran once. Without
// the first transmission in m.Sent, that receipt covers none: retried.
func TestAS4DeliveredAndRetransmission(t *testing.T) {
	gw := serveGateway(t, gatewayOptions{})
	tr := as4To(t, gw.URL+"/as4", nil)
	m := as4Message(t)
	a := attempt(t, tr, m, []byte(edi))
	if a.Outcome != outbound.Deliver || a.Evidence == nil || a.Evidence.Kind != "receipt" || a.Evidence.Signer == "" ||
		len(a.Evidence.Body) == 0 || a.Status != 200 {
		t.Fatalf("attempt %+v evidence %+v", a, a.Evidence)
	}
	if len(m.Sent) != 1 {
		t.Fatalf("sent %q", m.Sent)
	}
	if refs, err := transmit.DecodeReferences(m.Sent[0]); err != nil || len(refs) != 3 {
		t.Fatalf("references %+v %v", refs, err)
	}
	a = attempt(t, tr, m, []byte(edi))
	if a.Outcome != outbound.Deliver || len(m.Sent) != 2 || m.Sent[0] == m.Sent[1] {
		t.Fatalf("retransmission: %+v, sent %q", a, m.Sent)
	}
	// The second transmission's references, never receipted, in Sent
	// instead of the first's.
	forgotten := *m
	forgotten.Sent = []string{m.Sent[1]}
	a = attempt(t, tr, &forgotten, []byte(edi))
	if a.Outcome != outbound.Retry || !contains(a.Reason, "covers no transmission") {
		t.Fatalf("receipt of a transmission not in Sent: %+v", a)
	}
	if got := gw.received(); len(got) != 1 || got[0].sum != sum([]byte(edi)) {
		t.Fatalf("handler received %+v", got)
	}
}

// The gateway's receipt checked against a certificate that is not the
// partner's: not delivered.
func TestAS4ReceiptSignedByAnotherKey(t *testing.T) {
	gw := serveGateway(t, gatewayOptions{})
	otherKey := testpki.RSAKey(t, 1)
	other := testpki.SelfSigned(t, otherKey, testpki.Cert{CommonName: "not the partner"})
	tr := as4To(t, gw.URL+"/as4", func(s *transmit.AS4Settings) { s.ReceiptSigners = certs(other) })
	a := attempt(t, tr, as4Message(t), []byte(edi))
	if a.Outcome != outbound.Retry || !contains(a.Reason, "signature is not valid") {
		t.Fatalf("attempt %+v", a)
	}
	if got := gw.received(); len(got) != 1 {
		t.Fatalf("handler received %+v", got)
	}
}

// A message the gateway refuses (an action its P-Mode does not have) is
// answered with a signed ebMS error: refused with its code (but not when
// the signal's signature is not the partner's).
func TestAS4ErrorSignalRefused(t *testing.T) {
	gw := serveGateway(t, gatewayOptions{})
	tr := as4To(t, gw.URL+"/as4", nil)
	m := as4Message(t)
	m.Action = "NoSuchAction"
	a := attempt(t, tr, m, []byte(edi))
	if a.Outcome != outbound.Refuse || !contains(a.Reason, "EBMS:") || a.Evidence == nil || a.Evidence.Kind != "error" || a.Evidence.Signer == "" {
		t.Fatalf("attempt %+v evidence %+v", a, a.Evidence)
	}
	if got := gw.received(); len(got) != 0 {
		t.Fatalf("handler received %+v", got)
	}
	// The same error signal checked against another certificate is not
	// the partner's verdict: retried.
	otherKey := testpki.RSAKey(t, 1)
	other := testpki.SelfSigned(t, otherKey, testpki.Cert{CommonName: "not the partner"})
	tr = as4To(t, gw.URL+"/as4", func(s *transmit.AS4Settings) { s.ReceiptSigners = certs(other) })
	m = as4Message(t)
	m.Action = "NoSuchAction"
	if a := attempt(t, tr, m, []byte(edi)); a.Outcome != outbound.Retry || !contains(a.Reason, "signature is not valid") {
		t.Fatalf("error signal signed by another key: %+v", a)
	}
}

// HTTP answers that are no signal: 5xx retried with Retry-After, other
// 4xx refused, a 2xx without a receipt retried unless no receipt is
// required; a closed port and a partner that does not answer within the
// timeout are retried.
func TestAS4StatusAnswers(t *testing.T) {
	for _, c := range []struct {
		status   int
		required bool
		want     outbound.Outcome
	}{
		{503, true, outbound.Retry},
		{500, true, outbound.Retry},
		{404, true, outbound.Refuse},
		{200, true, outbound.Retry},
		{200, false, outbound.Deliver},
	} {
		t.Run(fmt.Sprintf("%d-%v", c.status, c.required), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Retry-After", "9")
				w.WriteHeader(c.status)
			}))
			defer srv.Close()
			tr := as4To(t, srv.URL, func(s *transmit.AS4Settings) { s.ReceiptRequired = c.required })
			a := attempt(t, tr, as4Message(t), []byte(edi))
			if a.Outcome != c.want || a.Status != c.status || a.RetryAfter != 9*time.Second {
				t.Fatalf("attempt %+v", a)
			}
		})
	}
	tr := as4To(t, "http://127.0.0.1:1/as4", nil)
	if a := attempt(t, tr, as4Message(t), []byte(edi)); a.Outcome != outbound.Retry || !contains(a.Reason, "refused") {
		t.Fatalf("closed port: %+v", a)
	}
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		<-release
	}))
	defer hang.Close()
	defer close(release)
	tr = as4To(t, hang.URL, func(s *transmit.AS4Settings) { s.Timeout = 300 * time.Millisecond })
	if a := attempt(t, tr, as4Message(t), []byte(edi)); a.Outcome != outbound.Retry || !contains(a.Reason, "timeout") {
		t.Fatalf("hanging partner: %+v", a)
	}
}

// The gateway's handler fails: its signed EBMS:0004 comes with HTTP 500
// and a SOAP Receiver fault, asking for a retransmission: retried, not
// refused; the next attempt is delivered.
func TestAS4ReceiverFaultRetried(t *testing.T) {
	gw := serveGateway(t, gatewayOptions{})
	gw.failNext(1)
	tr := as4To(t, gw.URL+"/as4", nil)
	m := as4Message(t)
	a := attempt(t, tr, m, []byte(edi))
	if a.Outcome != outbound.Retry || a.Status != 500 || !contains(a.Reason, "EBMS:0004") {
		t.Fatalf("attempt %+v", a)
	}
	if a = attempt(t, tr, m, []byte(edi)); a.Outcome != outbound.Deliver {
		t.Fatalf("second attempt %+v", a)
	}
	if got := gw.received(); len(got) != 1 {
		t.Fatalf("handler received %+v", got)
	}
}

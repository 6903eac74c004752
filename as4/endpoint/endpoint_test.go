package endpoint_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/as4/endpoint"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/wssec"
	"github.com/edigateway/gateway/internal/xmlenc"
	"github.com/edigateway/gateway/receipt"
)

// TestAlgorithmSetsSentTwice sends one message per algorithm set through
// the real HTTP server twice: the handler runs once, both answers are the
// same receipt byte for byte, and the receipt verifies and acknowledges
// every reference we signed.
func TestAlgorithmSetsSentTwice(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	edClient := func() *client.Client {
		return &client.Client{
			Signer: k.partnerEd.Key.(crypto.Signer), Certificate: k.partnerEd.Cert,
			Encryption:     &client.Encryption{Recipient: k.gatewayX25519.Cert, Options: xmlenc.EncryptOptions{Content: xmlenc.AlgAES128GCM}},
			ReceiptSigners: []*x509.Certificate{k.gatewayRSA.Cert},
		}
	}
	cases := []struct {
		name     string
		client   func() *client.Client
		compress bool
		sigAlg   string
		keyAlg   string // EncryptedKey algorithm expected in the message
		dataAlg  string
	}{
		{"rsa-sha256 rsa-oaep aes128-gcm gzip", func() *client.Client {
			c := rsaClient(k)
			c.Encryption.Options = xmlenc.EncryptOptions{KeyTransport: xmlenc.AlgRSAOAEP, DigestMethod: xmlenc.AlgSHA256,
				MGF: xmlenc.AlgMGF1SHA256, Content: xmlenc.AlgAES128GCM}
			return c
		}, true, wssec.AlgRSASHA256, xmlenc.AlgRSAOAEP, xmlenc.AlgAES128GCM},
		{"rsa-sha512 rsa-oaep-mgf1p aes256-gcm gzip", func() *client.Client {
			c := rsaClient(k)
			c.SignatureMethod, c.DigestMethod = wssec.AlgRSASHA512, wssec.AlgSHA512
			c.Encryption.Options = xmlenc.EncryptOptions{Content: xmlenc.AlgAES256GCM}
			return c
		}, true, wssec.AlgRSASHA512, xmlenc.AlgRSAOAEPMGF1P, xmlenc.AlgAES256GCM},
		{"edelivery2 ed25519 x25519 aes128-gcm gzip", edClient, true, wssec.AlgEdDSAEd25519, xmlenc.AlgKWAES128, xmlenc.AlgAES128GCM},
		{"rsa-sha256 signed only", func() *client.Client {
			c := rsaClient(k)
			c.Encryption = nil
			return c
		}, false, wssec.AlgRSASHA256, "", ""},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, harnessOptions{})
			c := tc.client()
			msg := testMessage(fmt.Sprintf("set-%d@acme.test", i))
			for j := range msg.Payloads {
				msg.Payloads[j].Compress = tc.compress
			}
			out, err := c.Build(msg)
			if err != nil {
				t.Fatal(err)
			}
			checkAlgorithms(t, out, tc.sigAlg, tc.keyAlg, tc.dataAlg, tc.compress)
			ctx := context.Background()
			first, err := c.Post(ctx, h.url, out)
			if err != nil {
				t.Fatalf("first post: %v", err)
			}
			second, err := c.Post(ctx, h.url, out)
			if err != nil {
				t.Fatalf("retransmission: %v", err)
			}
			if !bytes.Equal(first.Body, second.Body) || first.ContentType != second.ContentType || first.ContentType != endpoint.SOAPContentType {
				t.Fatalf("retransmission answered with a different receipt:\n%s\n%s", first.Body, second.Body)
			}
			if h.handler.count() != 1 {
				t.Fatalf("handler ran %d times", h.handler.count())
			}
			wantRefs := 2 + len(msg.Payloads) // Messaging, Body, attachments
			if len(out.References) != wantRefs || len(first.Receipt.References) != wantRefs {
				t.Errorf("references: sent %d, acknowledged %d, want %d", len(out.References), len(first.Receipt.References), wantRefs)
			}
			if first.Receipt.RefToMessageID != msg.MessageID || !strings.HasSuffix(first.Receipt.MessageID, "@gateway.test") {
				t.Errorf("receipt ids %q → %q", first.Receipt.MessageID, first.Receipt.RefToMessageID)
			}
			d := h.handler.delivered()[0]
			m := d.msg
			if m.Partner != "acme" || m.Protocol != "as4" || m.MessageID != msg.MessageID ||
				m.TransportKey != dedup.TransportKey("as4", acmeParty.Type, acmeParty.Value, msg.MessageID) {
				t.Errorf("message = %+v", m)
			}
			for hk, want := range map[string]string{
				endpoint.HeaderService: testService, endpoint.HeaderAction: testAction, endpoint.HeaderPMode: "invoice",
				endpoint.HeaderConversationID: "conv-1", endpoint.HeaderFromPartyID: acmeParty.Value,
				endpoint.HeaderToPartyID: gatewayParty.Value, endpoint.HeaderMessageProperty: "originalSender=urn:acme:erp",
			} {
				if got := m.Headers.Get(hk); got != want {
					t.Errorf("header %s = %q, want %q", hk, got, want)
				}
			}
			if len(d.payloads) != 2 || !bytes.Equal(d.payloads[0], invoiceXML) || !bytes.Equal(d.payloads[1], binaryPayload) {
				t.Fatalf("payloads not delivered intact (%d)", len(d.payloads))
			}
			if p := m.Payloads[0]; p.ContentType != "application/xml" || p.SHA256 != sha(invoiceXML) || p.Size != int64(len(invoiceXML)) ||
				!strings.HasPrefix(p.ContentID, "part1-") || p.Properties[as4.PropMimeType] != "application/xml" {
				t.Errorf("payload 0 = %+v", p)
			}
			if m.Payloads[1].ContentType != "application/octet-stream" || m.Payloads[1].SHA256 != sha(binaryPayload) {
				t.Errorf("payload 1 = %+v", m.Payloads[1])
			}
			// The audit trail of the same database tells the story.
			recs, err := h.store.Audit().ByMessage(ctx, "acme", msg.MessageID)
			if err != nil {
				t.Fatal(err)
			}
			var steps []string
			for _, r := range recs {
				steps = append(steps, string(r.Step)+":"+r.Decision+":"+r.Disposition)
			}
			want := "received:: decision:new: handler:ok: reply:accepted:receipt received:: decision:duplicate: reply::receipt"
			if strings.Join(steps, " ") != want {
				t.Errorf("audit\n got %s\nwant %s", strings.Join(steps, " "), want)
			}
		})
	}
}

// checkAlgorithms asserts that the built message uses what the case names.
func checkAlgorithms(t *testing.T, out *client.Outgoing, sigAlg, keyAlg, dataAlg string, compressed bool) {
	t.Helper()
	m := splitMIME(t, out)
	soap := string(m.bodies[0])
	if !strings.Contains(soap, `Algorithm="`+sigAlg+`"`) {
		t.Errorf("signature method %s not used", sigAlg)
	}
	if keyAlg != "" && !strings.Contains(soap, `Algorithm="`+keyAlg+`"`) {
		t.Errorf("key algorithm %s not used", keyAlg)
	}
	if dataAlg != "" && !strings.Contains(soap, `Algorithm="`+dataAlg+`"`) {
		t.Errorf("content encryption %s not used", dataAlg)
	}
	if keyAlg == "" && strings.Contains(soap, "EncryptedKey") {
		t.Error("signed-only message carries XML Encryption")
	}
	if compressed != strings.Contains(soap, "application/gzip") {
		t.Errorf("compression = %v not reflected in PartProperties", compressed)
	}
	for i, b := range m.bodies[1:] {
		if keyAlg == "" && i == 1 && !bytes.Equal(b, binaryPayload) && !compressed {
			t.Error("signed-only uncompressed attachment is not the payload")
		}
		if keyAlg != "" && bytes.Contains(b, []byte("INV-4711")) {
			t.Error("encrypted attachment holds plaintext")
		}
	}
}

// TestNegative sends broken and hostile messages: each is answered with a
// signed eb:Error of the right code, and nothing reaches the handler.
func TestNegative(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	h := newHarness(t, harnessOptions{maxBody: 1 << 20})
	signedOnly := func() *client.Client {
		c := rsaClient(k)
		c.Encryption = nil
		return c
	}
	build := func(c *client.Client, m *client.Message) *client.Outgoing {
		t.Helper()
		out, err := c.Build(m)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	n := 0
	next := func() *client.Message {
		n++
		return testMessage(fmt.Sprintf("neg-%d@acme.test", n))
	}
	cases := []struct {
		name   string
		code   string
		detail string // substring of eb:ErrorDetail
		out    func() *client.Outgoing
		c      func() *client.Client
	}{
		{"tampered attachment", as4.CodeFailedAuthentication, "digest", func() *client.Outgoing {
			out := build(signedOnly(), next())
			m := splitMIME(t, out)
			m.bodies[2][100] ^= 0x01
			return m.join(t, out)
		}, signedOnly},
		{"tampered encrypted attachment", as4.CodeFailedDecryption, "could not be decrypted", func() *client.Outgoing {
			out := build(rsaClient(k), next())
			m := splitMIME(t, out)
			m.bodies[1][40] ^= 0x01
			return m.join(t, out)
		}, nil},
		{"wrapped eb:Messaging", as4.CodePolicyNoncompliance, "eb:Messaging is not covered", func() *client.Outgoing {
			out := build(signedOnly(), next())
			m := splitMIME(t, out)
			m.editSOAP(t, func(doc *etree.Document) {
				header := find(doc.Root(), as4.NSSOAP12, "Header")
				orig := find(header, as4.NSEbMS, "Messaging")
				forged := orig.Copy()
				forged.RemoveAttr("wsu:Id")
				find(forged, as4.NSEbMS, "Action").SetText("Cancel")
				header.RemoveChild(orig)
				wrapper := header.CreateElement("x:Wrapper")
				wrapper.CreateAttr("xmlns:x", "urn:attacker")
				wrapper.AddChild(orig)
				header.AddChild(forged)
			})
			return m.join(t, out)
		}, signedOnly},
		{"unsigned body (signed body moved away)", as4.CodePolicyNoncompliance, "soap:Body is not covered", func() *client.Outgoing {
			out := build(signedOnly(), next())
			m := splitMIME(t, out)
			m.editSOAP(t, func(doc *etree.Document) {
				root := doc.Root()
				header := find(root, as4.NSSOAP12, "Header")
				body := find(root, as4.NSSOAP12, "Body")
				root.RemoveChild(body)
				wrapper := header.CreateElement("x:Wrapper")
				wrapper.CreateAttr("xmlns:x", "urn:attacker")
				wrapper.AddChild(body)
				evil := root.CreateElement(root.Space + ":Body")
				evil.CreateElement("x:Order").CreateAttr("xmlns:x", "urn:attacker")
			})
			return m.join(t, out)
		}, signedOnly},
		{"no signature", as4.CodePolicyNoncompliance, "", func() *client.Outgoing {
			out := build(signedOnly(), next())
			m := splitMIME(t, out)
			m.editSOAP(t, func(doc *etree.Document) {
				sec := find(doc.Root(), wssec.NamespaceWSSE, "Security")
				sec.Parent().RemoveChild(sec)
			})
			return m.join(t, out)
		}, signedOnly},
		{"unknown signer", as4.CodeFailedAuthentication, "", func() *client.Outgoing {
			c := signedOnly()
			c.Signer, c.Certificate = k.strangerRSA.Key.(crypto.Signer), k.strangerRSA.Cert
			return build(c, next())
		}, signedOnly},
		{"expired timestamp", as4.CodeFailedAuthentication, "expired", func() *client.Outgoing {
			c := signedOnly()
			c.TimestampTTL = 5 * time.Minute
			c.Now = func() time.Time { return time.Now().Add(-time.Hour) }
			return build(c, next())
		}, signedOnly},
		{"duplicated wsu:Id", as4.CodePolicyNoncompliance, "", func() *client.Outgoing {
			out := build(signedOnly(), next())
			m := splitMIME(t, out)
			m.editSOAP(t, func(doc *etree.Document) {
				header := find(doc.Root(), as4.NSSOAP12, "Header")
				id := wsuID(find(header, as4.NSEbMS, "Messaging"))
				dup := header.CreateElement("x:Decoy")
				dup.CreateAttr("xmlns:x", "urn:attacker")
				dup.CreateAttr("xmlns:wsu", as4.NSWSU)
				dup.CreateAttr("wsu:Id", id)
			})
			return m.join(t, out)
		}, signedOnly},
		{"unsupported mustUnderstand header", as4.CodeFeatureNotSupportedInconsistency, "wsrm", func() *client.Outgoing {
			out := build(signedOnly(), next())
			m := splitMIME(t, out)
			m.editSOAP(t, func(doc *etree.Document) {
				header := find(doc.Root(), as4.NSSOAP12, "Header")
				// Addressed to another node first: ignored.
				other := header.CreateElement("x:ForSomeoneElse")
				other.CreateAttr("xmlns:x", "urn:x")
				other.CreateAttr("S12:mustUnderstand", "true")
				other.CreateAttr("S12:role", "urn:other-node")
				seq := header.CreateElement("wsrm:Sequence")
				seq.CreateAttr("xmlns:wsrm", "http://docs.oasis-open.org/ws-rx/wsrm/200702")
				seq.CreateAttr("S12:mustUnderstand", "true")
			})
			return m.join(t, out)
		}, signedOnly},
		{"P-Mode mismatch", as4.CodeProcessingModeMismatch, "Refund", func() *client.Outgoing {
			m := next()
			m.Action = "Refund"
			return build(rsaClient(k), m)
		}, nil},
		{"unknown partner", as4.CodeProcessingModeMismatch, "urn:nobody", func() *client.Outgoing {
			m := next()
			m.From = as4.PartyID{Value: "urn:nobody"}
			return build(rsaClient(k), m)
		}, nil},
		{"bad gzip", as4.CodeDecompressionFailure, "payload", func() *client.Outgoing {
			m := next()
			m.Payloads[1].Compress, m.Payloads[1].Compressed = false, true
			return build(rsaClient(k), m)
		}, nil},
		{"encryption required", as4.CodePolicyNoncompliance, "", func() *client.Outgoing {
			m := next()
			m.From = strictParty
			return build(signedOnly(), m)
		}, nil},
		{"signal message", as4.CodeFeatureNotSupportedInconsistency, "user messages only", func() *client.Outgoing {
			// A receipt of ours, posted back as if it were a message.
			ok := build(rsaClient(k), next())
			resp, err := rsaClient(k).Post(context.Background(), h.url, ok)
			if err != nil {
				t.Fatal(err)
			}
			return &client.Outgoing{ContentType: resp.ContentType, Body: resp.Body}
		}, nil},
		{"not MIME or SOAP", as4.CodeMimeInconsistency, "", func() *client.Outgoing {
			return &client.Outgoing{ContentType: "text/plain", Body: []byte("hello")}
		}, nil},
		{"DTD", as4.CodeInvalidHeader, "", func() *client.Outgoing {
			return &client.Outgoing{ContentType: "application/soap+xml", Body: []byte(`<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><x>&a;</x>`)}
		}, nil},
		{"not XML", as4.CodeInvalidHeader, "", func() *client.Outgoing {
			return &client.Outgoing{ContentType: "application/soap+xml", Body: []byte("<S:Envelope")}
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := tc.out()
			before := h.handler.count()
			resp, err := signedOnly().Post(context.Background(), h.url, out)
			if err == nil {
				t.Fatalf("accepted: %s", resp.Body)
			}
			if resp.Status != http.StatusOK {
				t.Errorf("HTTP %d, want 200 for a permanent error", resp.Status)
			}
			code, ae := signalCode(t, k, resp)
			if code != tc.code || !strings.Contains(ae.Detail, tc.detail) {
				t.Fatalf("error %s %q, want %s containing %q", code, ae.Detail, tc.code, tc.detail)
			}
			if out.MessageID != "" && tc.code != as4.CodeInvalidHeader && ae.RefToMessageID != out.MessageID {
				t.Errorf("refToMessageInError %q, want %q", ae.RefToMessageID, out.MessageID)
			}
			if h.handler.count() != before {
				t.Fatal("the handler ran")
			}
		})
	}
	if n := h.handler.count(); n != 1 { // the receipt of the "signal message" case
		t.Errorf("handler ran %d times over the negative tests, want 1", n)
	}
	logs := h.logs.String()
	for _, leak := range []string{"INV-4711", "BEGIN"} {
		if strings.Contains(logs, leak) {
			t.Errorf("log holds %q", leak)
		}
	}
	if !strings.Contains(logs, `"msg":"as4 message rejected","partner":"acme","protocol":"as4","message_id":"neg-1@acme.test"`) {
		t.Errorf("no rejection log line for neg-1:\n%s", logs)
	}
}

// TestHTTPLimits: only POST, and a body over the limit is 413 whether or
// not its length was announced.
func TestHTTPLimits(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{maxBody: 64 << 10})
	resp, err := http.Get(h.url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET: %d %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	big := bytes.Repeat([]byte("x"), 65<<10)
	for _, chunked := range []bool{false, true} {
		var body interface{ Read([]byte) (int, error) } = bytes.NewReader(big)
		if chunked {
			body = struct{ io.Reader }{bytes.NewReader(big)} // unknown length
		}
		req, _ := http.NewRequest(http.MethodPost, h.url, body)
		req.Header.Set("Content-Type", "application/soap+xml")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("chunked=%v: HTTP %d, want 413", chunked, resp.StatusCode)
		}
	}
}

// TestInFlightAndRetry: a retransmission while the first delivery is still
// in the handler gets 503 with Retry-After; once accepted it gets the
// receipt; a delivery whose handler failed is processed anew on retry.
func TestInFlightAndRetry(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	h := newHarness(t, harnessOptions{})
	c := rsaClient(k)
	ctx := context.Background()

	entered, release := make(chan struct{}), make(chan struct{})
	h.handler.before = func(call int) error {
		switch call {
		case 1:
			close(entered)
			<-release
		case 2:
			return errors.New("ERP unreachable")
		}
		return nil
	}
	out, err := c.Build(testMessage("inflight@acme.test"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var first *client.Response
	var firstErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		first, firstErr = c.Post(ctx, h.url, out)
	}()
	<-entered
	busy, err := c.Post(ctx, h.url, out)
	if !errors.Is(err, client.ErrNoSignal) || busy.Status != http.StatusServiceUnavailable || busy.RetryAfter == "" {
		t.Fatalf("in flight: %v (HTTP %d, Retry-After %q)", err, busy.Status, busy.RetryAfter)
	}
	close(release)
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	again, err := c.Post(ctx, h.url, out)
	if err != nil || !bytes.Equal(again.Body, first.Body) {
		t.Fatalf("after acceptance: %v", err)
	}

	// Handler failure (call 2), then success (call 3) for a new message.
	out2, err := c.Build(testMessage("retry@acme.test"))
	if err != nil {
		t.Fatal(err)
	}
	failed, err := c.Post(ctx, h.url, out2)
	var se *receipt.SignalError
	if !errors.As(err, &se) || failed.Status != http.StatusInternalServerError {
		t.Fatalf("handler failure: %v (HTTP %d)", err, failed.Status)
	}
	if code, ae := signalCode(t, k, failed); code != as4.CodeOther || !strings.Contains(ae.Detail, "retransmit") ||
		ae.RefToMessageID != "retry@acme.test" || strings.Contains(ae.Detail, "ERP") {
		t.Errorf("handler failure signal: %s %q", code, ae.Detail)
	}
	if !bytes.Contains(failed.Body, []byte(":Receiver</")) {
		t.Error("no SOAP Receiver fault in the 500 answer")
	}
	ok, err := c.Post(ctx, h.url, out2)
	if err != nil || ok.Receipt == nil {
		t.Fatalf("retry after handler failure: %v", err)
	}
	if n := h.handler.count(); n != 3 {
		t.Errorf("handler calls %d, want 3", n)
	}
}

// TestDrift: the same eb:MessageId with another payload is refused with an
// error naming the id and both hashes; the first delivery stands.
func TestDrift(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	h := newHarness(t, harnessOptions{})
	c := rsaClient(k)
	ctx := context.Background()
	if _, _, err := c.Send(ctx, h.url, testMessage("drift@acme.test")); err != nil {
		t.Fatal(err)
	}
	m := testMessage("drift@acme.test")
	m.Payloads = m.Payloads[:1]
	_, resp, err := c.Send(ctx, h.url, m)
	if err == nil {
		t.Fatal("changed payload accepted")
	}
	code, ae := signalCode(t, k, resp)
	if code != as4.CodeOther || resp.Status != http.StatusOK || !strings.Contains(ae.Detail, "drift@acme.test") ||
		!strings.Contains(ae.Detail, sha(invoiceXML)) {
		t.Errorf("drift answer %s HTTP %d %q", code, resp.Status, ae.Detail)
	}
	if h.handler.count() != 1 {
		t.Errorf("handler ran %d times", h.handler.count())
	}
}

// TestTestMessage: an ebMS test message is acknowledged but never delivered.
func TestTestMessage(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	h := newHarness(t, harnessOptions{})
	m := testMessage("ping@acme.test")
	m.Service, m.Action = as4.TestService, as4.TestAction
	_, resp, err := rsaClient(k).Send(context.Background(), h.url, m)
	if err != nil || resp.Receipt == nil {
		t.Fatalf("test message: %v", err)
	}
	if h.handler.count() != 0 {
		t.Error("test message delivered to the handler")
	}
	if !strings.Contains(h.logs.String(), `"msg":"as4 test message acknowledged","partner":"acme"`) {
		t.Errorf("no log line:\n%s", h.logs.String())
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	dir := loadPartners(t, defaultPartners(t, k))
	base := func() endpoint.Config {
		return endpoint.Config{Partners: dir, Pipeline: &exchange.Pipeline{Store: dedup.NewMemoryStore(dedup.Options{})},
			Keys: []xmlenc.KeyPair{k.gatewayRSA}}
	}
	for name, mod := range map[string]func(*endpoint.Config){
		"no partners":       func(c *endpoint.Config) { c.Partners = nil },
		"no pipeline":       func(c *endpoint.Config) { c.Pipeline = nil },
		"no keys":           func(c *endpoint.Config) { c.Keys = nil },
		"X25519 only":       func(c *endpoint.Config) { c.Keys = []xmlenc.KeyPair{k.gatewayX25519} },
		"foreign key first": func(c *endpoint.Config) { c.Keys = []xmlenc.KeyPair{{Cert: k.gatewayRSA.Cert, Key: k.partnerRSA.Key}} },
	} {
		cfg := base()
		mod(&cfg)
		if _, err := endpoint.New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := endpoint.New(base()); err != nil {
		t.Errorf("valid config: %v", err)
	}
	// A key that cannot sign listed first: the next one signs.
	cfg := base()
	cfg.Keys = []xmlenc.KeyPair{k.gatewayX25519, k.gatewayRSA}
	if _, err := endpoint.New(cfg); err != nil {
		t.Errorf("X25519 first, RSA second: %v", err)
	}
}

// TestRebuiltRetransmission: the same message built again (new signature,
// same eb:MessageId and payloads) is a duplicate; the answer is the first
// receipt byte for byte, which the sender recognises as covering the
// earlier transmission.
func TestRebuiltRetransmission(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	h := newHarness(t, harnessOptions{})
	c := rsaClient(k)
	ctx := context.Background()
	_, first, err := c.Send(ctx, h.url, testMessage("rebuilt@acme.test"))
	if err != nil {
		t.Fatal(err)
	}
	_, again, err := c.Send(ctx, h.url, testMessage("rebuilt@acme.test"))
	if !errors.Is(err, client.ErrNotCovered) || again.Receipt == nil || !bytes.Equal(again.Body, first.Body) {
		t.Fatalf("rebuilt retransmission: %v", err)
	}
	if h.handler.count() != 1 {
		t.Errorf("handler ran %d times", h.handler.count())
	}
}

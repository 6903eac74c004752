package endpoint_test

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/as4/endpoint"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/internal/interop"
	"github.com/edigateway/gateway/internal/xmlenc"
	"github.com/edigateway/gateway/receipt"
)

const (
	holodeckContentType = `multipart/related; boundary="MIMEBoundary_416ba07b9ac392cc88fdb1c2ed23ba5e2e6d64fdf13325f1"; type="application/soap+xml"; start="<0.716ba07b9ac392cc88fdb1c2ed23ba5e2e6d64fdf13325f1@apache.org>"`
	holodeckMessageID   = "b545c3a0-e57f-46aa-862f-381eb4b70097@CLT-SMOREELS.mshome.net"
	holodeckJPEG        = "b545c3a0-e57f-46aa-862f-381eb4b7009-291596031@CLT-SMOREELS.mshome.net"
	holodeckXML         = "b545c3a0-e57f-46aa-862f-381eb4b7009-1650194442@CLT-SMOREELS.mshome.net"
)

// holodeckHarness is the gateway as AccessPointB with AccessPointA as the
// partner (Holodeck B2B's example agreement), the clock pinned to the
// message's eb:Timestamp.
// ourKeys replaces AccessPointB's key when given.
func holodeckHarness(t *testing.T, pmodeAction string, ourKeys ...xmlenc.KeyPair) (*harness, xmlenc.KeyPair) {
	dir := interop.Dir(t)
	b, err := endpoint.LoadKeyPair(filepath.Join(dir, "as4", "AccessPointB_cert.pem"), filepath.Join(dir, "as4", "AccessPointB_key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf(`id: holodeck-a
as4:
  party_id: org:holodeckb2b:example:company:A
  certificates: [%s]
  clock_skew: 5m
  pmodes:
    - id: 8.3.8-pmode
      agreement: http://agreements.holodeckb2b.org/examples/agreement0
      service: Test
      service_type: org:holodeckb2b:services
      action: %s
`, filepath.Join(dir, "as4", "AccessPointA_cert.pem"), pmodeAction)
	pinned := time.Date(2018, 12, 19, 8, 56, 30, 0, time.UTC)
	h := newHarness(t, harnessOptions{
		partnerYAML: map[string]string{"holodeck.yaml": yaml},
		keys:        keysOr(ourKeys, b),
		party:       as4.PartyID{Value: "org:eu:europa:as4:example"},
		now:         func() time.Time { return pinned },
	})
	return h, b
}

func keysOr(keys []xmlenc.KeyPair, def xmlenc.KeyPair) []xmlenc.KeyPair {
	if len(keys) > 0 {
		return keys
	}
	return []xmlenc.KeyPair{def}
}

func postRaw(t *testing.T, url, contentType string, body []byte) *client.Response {
	t.Helper()
	resp, err := http.Post(url, contentType, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &client.Response{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: b}
}

// TestInteropHolodeck: the recorded Holodeck B2B message (signed, then
// encrypted, attachments gzipped) is decrypted with AccessPointB's key,
// verified against AccessPointA's certificate (X509IssuerSerial, no BST),
// decompressed and delivered once; its retransmission gets the same
// receipt, which lists all four references.
func TestInteropHolodeck(t *testing.T) {
	t.Parallel()
	raw := interop.Read(t, "as4/as4-encrypted-signed-issuerserial.as4")
	h, b := holodeckHarness(t, "StoreMessage")
	first := postRaw(t, h.url, holodeckContentType, raw)
	second := postRaw(t, h.url, holodeckContentType, raw)
	if first.Status != http.StatusOK || !bytes.Equal(first.Body, second.Body) {
		t.Fatalf("answers differ or failed: HTTP %d\n%s\n%s", first.Status, first.Body, second.Body)
	}
	r, err := client.VerifyReceipt(first.ContentType, first.Body, client.ReceiptCheck{
		Trusted: []*x509.Certificate{b.Cert}, MessageID: holodeckMessageID,
	})
	if err != nil {
		t.Fatalf("receipt: %v\n%s", err, first.Body)
	}
	var uris []string
	for _, ref := range r.References {
		uris = append(uris, ref.URI)
	}
	if len(uris) != 4 || !strings.HasPrefix(uris[0], "#id-501d4b2b-029fbe44-") || !strings.HasPrefix(uris[1], "#id-501d4b2b-783369a7-") ||
		uris[2] != "cid:"+holodeckJPEG || uris[3] != "cid:"+holodeckXML {
		t.Errorf("NonRepudiationInformation references: %q", uris)
	}
	if r.References[0].Transforms[0].PrefixList != "xsd xsi" || r.References[0].DigestMethod != "http://www.w3.org/2001/04/xmlenc#sha256" {
		t.Errorf("Messaging reference copied wrongly: %+v", r.References[0])
	}
	if !r.Timestamp.Equal(time.Date(2018, 12, 19, 8, 56, 30, 0, time.UTC)) {
		t.Errorf("receipt timestamp %s, want the pinned clock", r.Timestamp)
	}
	if n := h.handler.count(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
	d := h.handler.delivered()[0]
	m := d.msg
	if m.Partner != "holodeck-a" || m.MessageID != holodeckMessageID ||
		m.TransportKey != dedup.TransportKey("as4", "", "org:holodeckb2b:example:company:A", holodeckMessageID) {
		t.Errorf("message %+v", m)
	}
	for k, want := range map[string]string{
		endpoint.HeaderService: "Test", endpoint.HeaderServiceType: "org:holodeckb2b:services", endpoint.HeaderAction: "StoreMessage",
		endpoint.HeaderConversationID: "org:holodeckb2b:test:conversation", endpoint.HeaderPMode: "8.3.8-pmode",
		endpoint.HeaderAgreementRef: "http://agreements.holodeckb2b.org/examples/agreement0",
		endpoint.HeaderToPartyID:    "org:eu:europa:as4:example", endpoint.HeaderTimestamp: "2018-12-19T08:56:26.657Z",
	} {
		if got := m.Headers.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	want := []struct {
		cid, ct, sum string
		size         int
	}{
		{holodeckJPEG, "image/jpeg", "060364613d88080a698ed6720d1a2288a30fdff223b4fb0cca280d3c3c67e93f", 296454},
		{holodeckXML, "application/xml", "df3d563a69eef2cc166afde17715eb803399df573737be357f15a64c37995170", 206},
	}
	if len(m.Payloads) != 2 || len(d.payloads) != 2 {
		t.Fatalf("%d payloads", len(m.Payloads))
	}
	for i, w := range want {
		p := m.Payloads[i]
		if p.ContentID != w.cid || p.ContentType != w.ct || p.SHA256 != w.sum || p.Size != int64(w.size) ||
			sha(d.payloads[i]) != w.sum || p.Properties[as4.PropCompressionType] != "application/gzip" {
			t.Errorf("payload %d: %s %s %d %s", i, p.ContentID, p.ContentType, p.Size, p.SHA256)
		}
	}
	if !bytes.HasPrefix(d.payloads[1], []byte("<?xml")) || !bytes.Contains(d.payloads[1], []byte("<example-document>")) {
		t.Errorf("XML payload: %.80q", d.payloads[1])
	}
}

// TestInteropHolodeckNegative: the recorded message without a matching
// P-Mode, with a flipped attachment byte, and under the wrong key.
func TestInteropHolodeckNegative(t *testing.T) {
	t.Parallel()
	raw := interop.Read(t, "as4/as4-encrypted-signed-issuerserial.as4")
	k := getKeys(t)
	t.Run("P-Mode mismatch", func(t *testing.T) {
		h, b := holodeckHarness(t, "OtherAction")
		resp := postRaw(t, h.url, holodeckContentType, raw)
		code := holodeckErrorCode(t, resp, b)
		if code != as4.CodeProcessingModeMismatch || h.handler.count() != 0 {
			t.Errorf("code %s, handler %d", code, h.handler.count())
		}
	})
	t.Run("flipped ciphertext", func(t *testing.T) {
		h, b := holodeckHarness(t, "StoreMessage")
		bad := bytes.Clone(raw)
		i := bytes.Index(bad, []byte("Content-ID: <"+holodeckXML+">"))
		if i < 0 {
			t.Fatal("attachment not found")
		}
		bad[i+200] ^= 0x01 // inside the 192-byte body after the part headers
		resp := postRaw(t, h.url, holodeckContentType, bad)
		if code := holodeckErrorCode(t, resp, b); code != as4.CodeFailedDecryption || h.handler.count() != 0 {
			t.Errorf("code %s, handler %d", code, h.handler.count())
		}
	})
	t.Run("not addressed to our key", func(t *testing.T) {
		// Our only key is another RSA key; it signs the error signal.
		h2, _ := holodeckHarness(t, "StoreMessage", k.gatewayRSA)
		resp := postRaw(t, h2.url, holodeckContentType, raw)
		if code := holodeckErrorCode(t, resp, k.gatewayRSA); code != as4.CodeFailedDecryption || h2.handler.count() != 0 {
			t.Errorf("code %s", code)
		}
	})
}

func holodeckErrorCode(t *testing.T, resp *client.Response, signer xmlenc.KeyPair) string {
	t.Helper()
	_, err := client.VerifyReceipt(resp.ContentType, resp.Body, client.ReceiptCheck{Trusted: []*x509.Certificate{signer.Cert}})
	var se *receipt.SignalError
	if !errors.As(err, &se) || len(se.Errors) != 1 {
		t.Fatalf("not a verified error signal: %v\n%s", err, resp.Body)
	}
	return se.Errors[0].Code
}

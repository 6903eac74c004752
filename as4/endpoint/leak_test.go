package endpoint_test

import (
	"bytes"
	"crypto"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/internal/wssec"
	"github.com/edigateway/gateway/internal/xmlenc"
)

// goPackagePrefix is an error text of a Go package (ours or the standard
// library's): its name, or an import path, followed by ": ".
var goPackagePrefix = regexp.MustCompile(`(?:^|[\s("'])(?:as4|wssec|xmlenc|trust|peppol|brainpool|cms|smime|limits|exchange|dedup|receipt|x509|asn1|base64|xml|gzip|flate|zlib|mime|multipart|etree|http|tls|rsa|ecdsa|ecdh|strconv|crypto/[a-z0-9]+|encoding/[a-z0-9]+): `)

// leadingWordPrefix is any single lower-case word before ": " at the start
// of a detail, the shape of every Go error text.
var leadingWordPrefix = regexp.MustCompile(`^[a-z0-9]+: `)

// TestNoAS4RefusalShowsGoErrorText sends a message down every refusal path
// of the AS4 endpoint before the pipeline and asserts that the partner's
// eb:ErrorDetail holds our reason and an incident reference, no Go package
// prefix (it was "wssec: policy noncompliance: …", "EBMS:0103: xmlenc:
// unsupported algorithm: …", "wssec: failed authentication: signer … is
// not a trusted certificate"), while the log and the audit record keep the
// detail.
func TestNoAS4RefusalShowsGoErrorText(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	h := newHarness(t, harnessOptions{ledger: true})
	signedOnly := func() *client.Client { c := rsaClient(k); c.Encryption = nil; return c }
	n := 0
	next := func() *client.Message { n++; return testMessage(fmt.Sprintf("leak-%d@acme.test", n)) }
	build := func(c *client.Client, m *client.Message) *client.Outgoing {
		t.Helper()
		out, err := c.Build(m)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	edit := func(c *client.Client, f func(doc *etree.Document)) func() *client.Outgoing {
		return func() *client.Outgoing {
			out := build(c, next())
			m := splitMIME(t, out)
			m.editSOAP(t, f)
			return m.join(t, out)
		}
	}
	attachment := func(c *client.Client, f func(b []byte)) func() *client.Outgoing {
		return func() *client.Outgoing {
			out := build(c, next())
			m := splitMIME(t, out)
			f(m.bodies[1])
			return m.join(t, out)
		}
	}
	raw := func(ct, body string) func() *client.Outgoing {
		return func() *client.Outgoing { return &client.Outgoing{ContentType: ct, Body: []byte(body)} }
	}
	cases := []struct {
		name string
		code string
		out  func() *client.Outgoing
	}{
		{"bad signature value", as4.CodeFailedAuthentication, edit(signedOnly(), func(doc *etree.Document) {
			sv := find(doc.Root(), wssec.NamespaceDSig, "SignatureValue")
			sv.SetText("AAAA" + strings.TrimSpace(sv.Text())[4:])
		})},
		{"signature value not base64", as4.CodeFailedAuthentication, edit(signedOnly(), func(doc *etree.Document) {
			find(doc.Root(), wssec.NamespaceDSig, "SignatureValue").SetText("!!!")
		})},
		{"tampered attachment (digest)", as4.CodeFailedAuthentication, attachment(signedOnly(), func(b []byte) { b[100] ^= 1 })},
		{"untrusted signer", as4.CodeFailedAuthentication, func() *client.Outgoing {
			c := signedOnly()
			c.Signer, c.Certificate = k.strangerRSA.Key.(crypto.Signer), k.strangerRSA.Cert
			return build(c, next())
		}},
		{"expired wsu:Timestamp", as4.CodeFailedAuthentication, func() *client.Outgoing {
			c := signedOnly()
			c.TimestampTTL = 5 * time.Minute
			c.Now = func() time.Time { return time.Now().Add(-time.Hour) }
			return build(c, next())
		}},
		{"eb:Timestamp older than the dedup window", as4.CodeFailedAuthentication, func() *client.Outgoing {
			c := rsaClient(k)
			c.Now = func() time.Time { return time.Now().Add(-400 * 24 * time.Hour) }
			return build(c, next())
		}},
		{"unsupported key transport algorithm", as4.CodePolicyNoncompliance, edit(rsaClient(k), func(doc *etree.Document) {
			find(doc.Root(), xmlenc.NSXEnc, "EncryptionMethod").CreateAttr("Algorithm", "urn:example:unsupported")
		})},
		{"AES-CBC content encryption", as4.CodePolicyNoncompliance, edit(rsaClient(k), func(doc *etree.Document) {
			for _, ed := range doc.FindElements("//EncryptedData") {
				find(ed, xmlenc.NSXEnc, "EncryptionMethod").CreateAttr("Algorithm", xmlenc.AlgAES128CBC)
			}
		})},
		{"wrapped eb:Messaging (policy)", as4.CodePolicyNoncompliance, edit(signedOnly(), func(doc *etree.Document) {
			header := find(doc.Root(), as4.NSSOAP12, "Header")
			orig := find(header, as4.NSEbMS, "Messaging")
			forged := orig.Copy()
			forged.RemoveAttr("wsu:Id")
			header.RemoveChild(orig)
			wrapper := header.CreateElement("x:Wrapper")
			wrapper.CreateAttr("xmlns:x", "urn:attacker")
			wrapper.AddChild(orig)
			header.AddChild(forged)
		})},
		{"no security header", as4.CodePolicyNoncompliance, edit(signedOnly(), func(doc *etree.Document) {
			sec := find(doc.Root(), wssec.NamespaceWSSE, "Security")
			sec.Parent().RemoveChild(sec)
		})},
		{"encryption required", as4.CodePolicyNoncompliance, func() *client.Outgoing {
			m := next()
			m.From = strictParty
			return build(signedOnly(), m)
		}},
		{"decryption failure", as4.CodeFailedDecryption, attachment(rsaClient(k), func(b []byte) { b[40] ^= 1 })},
		{"encrypted key not base64", as4.CodeFailedDecryption, edit(rsaClient(k), func(doc *etree.Document) {
			find(find(doc.Root(), xmlenc.NSXEnc, "EncryptedKey"), xmlenc.NSXEnc, "CipherValue").SetText("!!!")
		})},
		{"decompression failure", as4.CodeDecompressionFailure, func() *client.Outgoing {
			m := next()
			m.Payloads[1].Compress, m.Payloads[1].Compressed = false, true
			return build(rsaClient(k), m)
		}},
		{"unknown party", as4.CodeProcessingModeMismatch, func() *client.Outgoing {
			m := next()
			m.From = as4.PartyID{Value: "urn:nobody"}
			return build(rsaClient(k), m)
		}},
		{"P-Mode mismatch", as4.CodeProcessingModeMismatch, func() *client.Outgoing {
			m := next()
			m.Action = "Refund"
			return build(rsaClient(k), m)
		}},
		{"SOAP envelope cut short", as4.CodeInvalidHeader, raw("application/soap+xml",
			`<?xml version="1.0"?><env:Envelope xmlns:env="http://www.w3.org/2003/05/soap-envelope"><env:Header><eb:Messaging`)},
		{"not XML", as4.CodeInvalidHeader, raw("application/soap+xml", "<S:Envelope")},
		{"DTD", as4.CodeInvalidHeader, raw("application/soap+xml", `<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><x>&a;</x>`)},
		{"not MIME or SOAP", as4.CodeMimeInconsistency, raw("text/plain", "hello")},
		{"multipart without boundary", as4.CodeMimeInconsistency, raw("multipart/related", "--x\r\n\r\n")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := tc.out()
			req, err := http.NewRequest(http.MethodPost, h.url, bytes.NewReader(out.Body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", out.ContentType)
			hr, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(hr.Body)
			hr.Body.Close()
			resp := &client.Response{Status: hr.StatusCode, ContentType: hr.Header.Get("Content-Type"), Body: body}
			code, ae := signalCode(t, k, resp)
			if code != tc.code {
				t.Errorf("answer %s, want %s: %s", code, tc.code, ae.Detail)
			}
			if m := goPackagePrefix.FindString(ae.Detail); m != "" {
				t.Errorf("eb:ErrorDetail carries the Go package prefix %q: %s", m, ae.Detail)
			}
			if leadingWordPrefix.MatchString(ae.Detail) {
				t.Errorf("eb:ErrorDetail begins with a package-like prefix: %s", ae.Detail)
			}
			if m := goPackagePrefix.Find(body); m != nil {
				t.Errorf("the signal carries the Go package prefix %q:\n%s", m, body)
			}
			noLeak(t, h, body)
		})
	}
	if h.handler.count() != 0 {
		t.Fatalf("handler ran %d times", h.handler.count())
	}
}

package server

import (
	"compress/gzip"
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/as4/endpoint"
	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/partners"
	"github.com/edigateway/gateway/receipt"
	"github.com/edigateway/gateway/wssec"
	"github.com/edigateway/gateway/xmlenc"
)

// as4Streamed is an AS4 message from the demo partner with one attachment
// of size bytes of seeded PRNG text, gzipped (level 1), signed (eb:Messaging,
// soap:Body, the attachment) and AES-128-GCM encrypted for the gateway, as
// AS4 senders do: compress, sign, encrypt. The gzipped attachment waits in
// a file; it is digested and encrypted as streams, never held.
type as4Streamed struct {
	id, contentType string
	refs            []receipt.Reference
	// body reads the whole multipart body, once.
	body io.Reader
	gw   []*x509.Certificate
}

// newAS4Streamed builds the message; body is to be read once.
func newAS4Streamed(t testing.TB, size int64, seed uint64, id string) *as4Streamed {
	t.Helper()
	kp, gw := demoAS4Keys(t)
	const unregistered = "urn:oasis:names:tc:ebcore:partyid-type:unregistered"
	cid := "catalogue-" + id
	doc := etree.NewDocument()
	err := doc.ReadFromString(`<S12:Envelope xmlns:S12="http://www.w3.org/2003/05/soap-envelope"><S12:Header>` +
		`<eb:Messaging xmlns:eb="http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/" S12:mustUnderstand="true"><eb:UserMessage>` +
		`<eb:MessageInfo><eb:Timestamp>` + time.Now().UTC().Format("2006-01-02T15:04:05.000Z") + `</eb:Timestamp><eb:MessageId>` + id + `</eb:MessageId></eb:MessageInfo>` +
		`<eb:PartyInfo><eb:From><eb:PartyId type="` + unregistered + `">urn:demo:partner</eb:PartyId><eb:Role>` + client.RoleInitiator + `</eb:Role></eb:From>` +
		`<eb:To><eb:PartyId type="` + unregistered + `">urn:demo:gateway</eb:PartyId><eb:Role>` + client.RoleResponder + `</eb:Role></eb:To></eb:PartyInfo>` +
		`<eb:CollaborationInfo><eb:Service>urn:demo:invoicing</eb:Service><eb:Action>Deliver</eb:Action><eb:ConversationId>` + id + `</eb:ConversationId></eb:CollaborationInfo>` +
		`<eb:PayloadInfo><eb:PartInfo href="cid:` + cid + `"><eb:PartProperties><eb:Property name="MimeType">application/edi-consent</eb:Property>` +
		`<eb:Property name="CompressionType">application/gzip</eb:Property></eb:PartProperties></eb:PartInfo></eb:PayloadInfo>` +
		`</eb:UserMessage></eb:Messaging></S12:Header><S12:Body/></S12:Envelope>`)
	if err != nil {
		t.Fatal(err)
	}
	// The attachment as the signature covers it: the gzip stream of the
	// payload, written once to a file (compressing is the sender's work,
	// the slowest step here) and read from it twice.
	zpath := filepath.Join(t.TempDir(), "payload.gz")
	zf, err := os.Create(zpath)
	if err != nil {
		t.Fatal(err)
	}
	zw, _ := gzip.NewWriterLevel(zf, 1)
	if _, err := io.Copy(zw, textReader{newPRNG(seed, size)}); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zf.Close(); err != nil {
		t.Fatal(err)
	}
	gz := func() (io.ReadCloser, error) { return os.Open(zpath) }
	h := textproto.MIMEHeader{"Content-Type": {"application/gzip"}, "Content-Id": {"<" + cid + ">"}}
	if err := wssec.Sign(doc, []wssec.Attachment{{ContentID: cid, Header: h, Open: gz}},
		wssec.SignOptions{Signer: kp.Key.(crypto.Signer), Certificate: kp.Cert}); err != nil {
		t.Fatal(err)
	}
	sig, err := wssec.ParseSignature(doc, wssec.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := &as4Streamed{id: id, gw: gw}
	for _, r := range sig.References {
		ref := receipt.Reference{URI: r.URI, DigestMethod: r.DigestMethod, DigestValue: r.DigestValue}
		for _, tf := range r.Transforms {
			ref.Transforms = append(ref.Transforms, receipt.Transform{Algorithm: tf.Algorithm, PrefixList: tf.PrefixList})
		}
		m.refs = append(m.refs, ref)
	}
	enc, err := xmlenc.Encrypt(doc, []xmlenc.Attachment{{ContentID: cid, Header: h, Open: gz}}, xmlenc.Recipient{Cert: gw[0]}, xmlenc.EncryptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	soap, err := doc.WriteToString()
	if err != nil {
		t.Fatal(err)
	}
	ciphertext, err := enc[0].Open()
	if err != nil {
		t.Fatal(err)
	}
	const boundary = "MIMEBoundary_gateway_as4_stream"
	m.contentType = mime.FormatMediaType("multipart/related", map[string]string{
		"boundary": boundary, "type": "application/soap+xml", "start": "<root-" + id + ">"})
	m.body = io.MultiReader(
		strings.NewReader("--"+boundary+"\r\nContent-Type: application/soap+xml; charset=UTF-8\r\nContent-Transfer-Encoding: binary\r\nContent-Id: <root-"+id+">\r\n\r\n"+soap+
			"\r\n--"+boundary+"\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: binary\r\nContent-Id: <"+cid+">\r\n\r\n"),
		ciphertext,
		strings.NewReader("\r\n--"+boundary+"--\r\n"))
	return m
}

// post sends the message (chunked unless length is known) and checks that
// the answer is the gateway's signed receipt for it, covering every
// reference the message signed.
func (m *as4Streamed) post(url string, body io.Reader, length int64) error {
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, url+"/as4", body)
	req.Header.Set("Content-Type", m.contentType)
	req.ContentLength = length
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d %.400q", resp.StatusCode, b)
	}
	if _, err := client.VerifyReceipt(resp.Header.Get("Content-Type"), b, client.ReceiptCheck{
		Trusted: m.gw, MessageID: m.id, References: m.refs}); err != nil {
		return fmt.Errorf("not a receipt for the message: %v: %.400q", err, b)
	}
	return nil
}

// TestStreamedAS4GiBMemoryBounded: a 1 GiB AS4 payload, gzipped, signed and
// AES-128-GCM encrypted (generated on the fly, nothing of it kept), sent
// chunked through the real HTTP server over loopback: answered with the
// gateway's signed receipt covering the message's references, the handler
// reads 1 GiB from Payload.Open, and the peak growth of heap and RSS stays
// within 64 MiB.
func TestStreamedAS4GiBMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("1 GiB through the server")
	}
	size := int64(1 << 30)
	if os.Getenv("GATEWAY_AS4_STREAM_SIZE") != "" { // profiling smaller runs
		size, _ = strconv.ParseInt(os.Getenv("GATEWAY_AS4_STREAM_SIZE"), 10, 64)
	}
	var got int64
	var sum string
	url := memoryServerWith(t, func(c *config.Config) { c.Limits.MaxDecompressedBytes = 2 << 30 }, drainPayload(&got, &sum))
	msg := newAS4Streamed(t, size, 11, "gib-as4-1@demo")
	var rows []string
	measured(t, &rows, "AS4 gzip+signed+GCM, 1 GiB payload generated on the fly", func() error {
		start := time.Now()
		body := &countingBody{ReadCloser: io.NopCloser(msg.body)}
		err := msg.post(url, body, -1)
		t.Logf("%d MiB AS4 payload (%d MB on the wire) in %s (%.0f MB/s of payload)", size>>20, body.n/1e6,
			time.Since(start).Round(time.Millisecond), float64(size)/time.Since(start).Seconds()/1e6)
		return err
	}, true)
	if got != size || len(sum) != 64 {
		t.Fatalf("handler read %d payload bytes (sha256 %q), want %d", got, sum, size)
	}
}

// demoAS4Keys are the demo partner's AS4 key pair and the gateway's
// certificates.
func demoAS4Keys(t testing.TB) (xmlenc.KeyPair, []*x509.Certificate) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	demo := filepath.Join(filepath.Dir(file), "..", "testdata", "demo")
	kp, err := endpoint.LoadKeyPair(filepath.Join(demo, "partners", "demo-partner.pem"), filepath.Join(demo, "keys", "demo-partner.key"))
	if err != nil {
		t.Fatal(err)
	}
	gw, err := partners.ReadCertificates(filepath.Join(demo, "keys", "gateway.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return kp, gw
}

// drainPayload is a business handler that reads the first payload to its
// end from Payload.Open, recording how many bytes it read and, when sum is
// set, the payload's SHA-256.
func drainPayload(n *int64, sum *string) func(m *exchange.Message) error {
	return func(m *exchange.Message) error {
		rc, err := m.Payloads[0].Open()
		if err != nil {
			return err
		}
		defer rc.Close()
		*n, err = io.Copy(io.Discard, rc)
		if sum != nil {
			*sum = m.Payloads[0].SHA256
		}
		return err
	}
}

// demoPartners copies the demo partner directory to a new one, its
// demo.yaml changed by edit, and returns it.
func demoPartners(t testing.TB, edit func(yaml string) string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	demo := filepath.Join(filepath.Dir(file), "..", "testdata", "demo", "partners")
	dir := t.TempDir()
	for _, f := range []string{"demo.yaml", "demo-partner.pem"} {
		b, err := os.ReadFile(filepath.Join(demo, f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "demo.yaml" {
			b = []byte(edit(string(b)))
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

package server

import (
	"compress/gzip"
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/as4/endpoint"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/xmlenc"
	"github.com/edigateway/gateway/partners"
	"github.com/edigateway/gateway/receipt"
)

// as4Streamed is an AS4 message from the demo partner with one attachment
// of size bytes of seeded PRNG text, gzipped (level 1), signed (eb:Messaging,
// soap:Body, the attachment) and AES-128-GCM encrypted for the gateway, as
// AS4 senders do: compress, sign, encrypt. It is built by the sender's own
// builder, client.Prepare (as `gateway send-as4` builds), into a spool
// file: the payload is generated as it is read, never held.
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
	c, gw := demoAS4Sender(t)
	c.GzipLevel = gzip.BestSpeed
	msg := demoAS4Message(id, nil)
	msg.Payloads = []client.Payload{{ContentID: "catalogue-" + id, MimeType: "application/edi-consent", Compress: true,
		Size: size, Open: func() (io.ReadCloser, error) { return io.NopCloser(textReader{newPRNG(seed, size)}), nil }}}
	out, err := c.Prepare(msg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	return &as4Streamed{id: id, contentType: out.ContentType, refs: out.References, body: out.BodyReader(), gw: gw}
}

// demoAS4Sender is demoAS4Client that also encrypts for the gateway
// (AES-128-GCM), verifies receipts against the gateway's certificates and
// builds in a test directory; it also returns the gateway's certificates.
func demoAS4Sender(t testing.TB) (*client.Client, []*x509.Certificate) {
	t.Helper()
	_, gw := demoAS4Keys(t)
	c := demoAS4Client(t)
	c.Encryption, c.ReceiptSigners, c.SpoolDir = &client.Encryption{Recipient: gw[0]}, gw, t.TempDir()
	c.HTTP = &http.Client{Timeout: 10 * time.Minute}
	return c, gw
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
// AES-128-GCM encrypted (generated on the fly into the sender's spool file
// by client.Prepare, before the measure), sent chunked through the real
// HTTP server over loopback: answered with the
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
	url := memoryServerWith(t, nil, drainPayload(&got, &sum))
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
	demo := filepath.Join(filepath.Dir(file), "..", "testdata", "fixture")
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
	demo := filepath.Join(filepath.Dir(file), "..", "testdata", "fixture", "partners")
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

package server

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/exchange"
)

// senderPrepareGrowth bounds the heap and RSS growth of building a message
// of any size (as2client.PrepareStream): its buffers, not the payload.
const senderPrepareGrowth = 16 << 20

// TestSendStreamedAS2Bounded: `gateway send`'s client builds a 256 MiB
// file into a signed, AES-128-GCM encrypted message (as2client.
// PrepareStream: one pass, spool file) with heap and RSS growth within 16
// MiB, sends it through the real server over loopback with a sync signed
// MDN that carries its MIC, sender and receiver together within the
// receiver's 64 MiB, and the handler reads the very payload.
func TestSendStreamedAS2Bounded(t *testing.T) {
	if testing.Short() {
		t.Skip("256 MiB through the server")
	}
	const size = 256 << 20
	dir := t.TempDir()
	file := filepath.Join(dir, "cad.bin")
	want := writeFile(t, file, newPRNG(9, size))
	var got received
	url := memoryServerWith(t, nil, got.handler)
	partner, gw := demoAS2KeyPairs(t)
	c := &as2client.Client{URL: url + "/as2", From: "DEMO", To: "GATEWAY", SignCert: partner.Cert, SignKey: partner.Key,
		SignDigest: "sha256", RecipientCerts: []*x509.Certificate{gw.Cert}, Cipher: "aes128-gcm", SignedMDN: true,
		SpoolDir: dir, HTTP: &http.Client{Timeout: 5 * time.Minute}}

	var msg *as2client.Message
	p := startProbe()
	func() {
		in, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		msg, err = c.PrepareStream(in, "application/octet-stream", "cad.bin")
		if err != nil {
			t.Fatal(err)
		}
	}()
	heap, rss := p.end()
	defer msg.Close()
	t.Logf("prepared %d MiB body: heap +%d MiB, RSS +%d MiB", msg.Size()>>20, heap>>20, rss>>20)
	if heap > senderPrepareGrowth || rss > senderPrepareGrowth {
		t.Errorf("building a %d MiB message grew heap %d MiB, RSS %d MiB (bound %d MiB)", size>>20, heap>>20, rss>>20, senderPrepareGrowth>>20)
	}
	if msg.Size() < size {
		t.Fatalf("body %d bytes", msg.Size())
	}

	p = startProbe()
	start := time.Now()
	res, err := c.Send(context.Background(), msg)
	took := time.Since(start)
	heap, rss = p.end()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sent in %s: heap +%d MiB, RSS +%d MiB (sender and receiver)", took.Round(time.Millisecond), heap>>20, rss>>20)
	if !res.OK() || res.MDN == nil || !res.MDN.Verified || !res.MDN.MICMatched || res.BytesSent != msg.Size() {
		t.Fatalf("result %+v problems %q", res, res.Problems)
	}
	if heap > maxGrowth || rss > maxGrowth {
		t.Errorf("sending grew heap %d MiB, RSS %d MiB (bound %d MiB)", heap>>20, rss>>20, maxGrowth>>20)
	}
	if got.n != size || got.sum != want {
		t.Fatalf("handler read %d bytes, sha256 %s", got.n, got.sum)
	}
}

// TestSendStreamedAS4Bounded: `gateway send-as4`'s client (client.Prepare
// with the file read through Payload.Open, gzip at the default level, as
// the command does) builds a 256 MiB file into a signed, AES-128-GCM
// encrypted AS4 message with heap and RSS growth within 16 MiB; Post sends
// it through the real server over loopback with its length, sender and
// receiver together within the receiver's 64 MiB; the signed receipt
// verifies and acknowledges every reference, and the handler reads the
// very payload.
func TestSendStreamedAS4Bounded(t *testing.T) {
	if testing.Short() {
		t.Skip("256 MiB through the server")
	}
	const size = 256 << 20
	dir := t.TempDir()
	file := filepath.Join(dir, "catalogue.edi")
	want := writeFile(t, file, textReader{newPRNG(10, size)})
	var got received
	url := memoryServerWith(t, nil, got.handler)
	c, _ := demoAS4Sender(t)
	c.SpoolDir = dir
	msg := demoAS4Message("send-as4-stream@demo", nil)
	msg.Payloads = []client.Payload{{MimeType: "application/edifact", Compress: true, Size: size,
		Open: func() (io.ReadCloser, error) { return os.Open(file) }}}

	p := startProbe()
	start := time.Now()
	out, err := c.Prepare(msg)
	took := time.Since(start)
	heap, rss := p.end()
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	t.Logf("prepared %d MiB body from %d MiB in %s: heap +%d MiB, RSS +%d MiB", out.Size()>>20, size>>20,
		took.Round(time.Millisecond), heap>>20, rss>>20)
	if heap > senderPrepareGrowth || rss > senderPrepareGrowth {
		t.Errorf("building a %d MiB AS4 message grew heap %d MiB, RSS %d MiB (bound %d MiB)", size>>20, heap>>20, rss>>20, senderPrepareGrowth>>20)
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 { // the payload file only
		t.Errorf("the spool directory holds %d files", len(left))
	}

	p = startProbe()
	start = time.Now()
	resp, err := c.Post(context.Background(), url+"/as4", out)
	took = time.Since(start)
	heap, rss = p.end()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sent in %s: heap +%d MiB, RSS +%d MiB (sender and receiver)", took.Round(time.Millisecond), heap>>20, rss>>20)
	if resp.Receipt == nil || resp.Receipt.RefToMessageID != out.MessageID || len(out.References) != 3 || len(resp.Receipt.References) != 3 {
		t.Fatalf("receipt %+v for %d references", resp.Receipt, len(out.References))
	}
	if heap > maxGrowth || rss > maxGrowth {
		t.Errorf("sending grew heap %d MiB, RSS %d MiB (bound %d MiB)", heap>>20, rss>>20, maxGrowth>>20)
	}
	if got.n != size || got.sum != want {
		t.Fatalf("handler read %d bytes, sha256 %s", got.n, got.sum)
	}
}

// writeFile writes what r reads to path and returns its SHA-256 (hex).
func writeFile(t *testing.T, path string, r io.Reader) string {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(f, h), r); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// received is what handler read of a message's first payload: its
// length and SHA-256 (hex).
type received struct {
	n   int64
	sum string
}

func (g *received) handler(m *exchange.Message) error {
	rc, err := m.Payloads[0].Open()
	if err != nil {
		return err
	}
	defer rc.Close()
	h := sha256.New()
	g.n, err = io.Copy(h, rc)
	g.sum = hex.EncodeToString(h.Sum(nil))
	return err
}

package server

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/smime"
)

// seededText is n bytes of EDI-like text from a seeded PRNG (compressible
// about as real documents are).
func seededText(n int, seed uint64) []byte {
	rng := mrand.New(mrand.NewPCG(seed, seed+1))
	b := make([]byte, n)
	for i := range b {
		if i%64 == 63 {
			b[i] = '\n'
			continue
		}
		b[i] = "0123456789ABCDEFGHIJ+:'"[rng.IntN(23)]
	}
	return b
}

// TestStreamedAS2BodyMemoryBounded: a 96 MiB AS2 payload (signed,
// compressed, AES-GCM encrypted; sync signed MDN) through the real HTTP
// server over loopback is received with peak heap and RSS growth ≤ 64 MiB
// (in memory it took three to four times the body), the MDN carries the
// sender's MIC, and the handler reads the whole payload from its spool
// file.
func TestStreamedAS2BodyMemoryBounded(t *testing.T) {
	const size = 96 << 20 // over the 64 MiB the envelope scan once read whole; it now reads the spool file as a stream
	var seen struct {
		n   int64
		sum string
	}
	url := memoryServerWith(t, nil, func(m *exchange.Message) error {
		if len(m.Payloads) != 1 {
			return fmt.Errorf("%d payloads", len(m.Payloads))
		}
		rc, err := m.Payloads[0].Open()
		if err != nil {
			return err
		}
		defer rc.Close()
		seen.n, err = io.Copy(io.Discard, rc)
		seen.sum = m.Payloads[0].SHA256
		return err
	})
	partner, gw := demoAS2KeyPairs(t)
	c := &as2client.Client{URL: url + "/as2", From: "DEMO", To: "GATEWAY", SignCert: partner.Cert, SignKey: partner.Key, SignDigest: "sha256",
		RecipientCerts: []*x509.Certificate{gw.Cert}, Cipher: "aes128-gcm", Compression: smime.CompressThenSign,
		MDN: as2client.MDNSync, SignedMDN: true}
	m, err := c.Prepare(seededText(size, 9), "application/edi-consent", "statement.edi")
	if err != nil {
		t.Fatal(err)
	}
	// The body waits in a file, so that the client side costs nothing
	// while the server is measured.
	bodyPath := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(bodyPath, m.Body, 0o600); err != nil {
		t.Fatal(err)
	}
	bodyLen := int64(len(m.Body))
	header, mic := m.Header.Clone(), m.MIC
	m = nil
	var rows []string
	measured(t, &rows, fmt.Sprintf("AS2 signed+compressed+GCM, %d MiB body, streamed", bodyLen>>20), func() error {
		f, err := os.Open(bodyPath)
		if err != nil {
			return err
		}
		defer f.Close()
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, url+"/as2", f)
		req.Header, req.ContentLength = header, bodyLen
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode != 200 || !strings.Contains(string(b), "processed") || strings.Contains(string(b), "processed/error") ||
			!strings.Contains(string(b), mic) || !strings.Contains(string(b), "pkcs7-signature") {
			return fmt.Errorf("HTTP %d %.400q, want a signed MDN, processed, with MIC %s", resp.StatusCode, b, mic)
		}
		return nil
	}, true)
	if seen.n != size || len(seen.sum) != 64 {
		t.Fatalf("handler read %d payload bytes (sha256 %q), want %d", seen.n, seen.sum, size)
	}
}

// memoryServerWith is memoryServer with h as the business handler.
func memoryServerWith(t *testing.T, tune func(c *config.Config), h func(m *exchange.Message) error) string {
	t.Helper()
	cfg := demoConfig(t)
	cfg.Partners = plainDemoPartners(t)
	cfg.SpoolDir = t.TempDir()
	if tune != nil {
		tune(cfg)
	}
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.SetHandler(exchange.HandlerFunc(func(ctx context.Context, m *exchange.Message) error { return h(m) }))
	return serveGateway(t, s)
}

// prngReader yields n bytes from a seeded PRNG, generated as read.
type prngReader struct {
	rng *mrand.PCG
	n   int64
}

func newPRNG(seed uint64, n int64) *prngReader {
	return &prngReader{rng: mrand.NewPCG(seed, ^seed), n: n}
}

func (p *prngReader) Read(b []byte) (int, error) {
	if p.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > p.n {
		b = b[:p.n]
	}
	i := 0
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], p.rng.Uint64())
	}
	if i < len(b) {
		var t [8]byte
		binary.LittleEndian.PutUint64(t[:], p.rng.Uint64())
		copy(b[i:], t[:])
	}
	p.n -= int64(len(b))
	return len(b), nil
}

// TestStreamedAS2GiBMemoryBounded: a 1 GiB signed AS2 message, generated on
// the fly from a seeded PRNG (nothing of it is kept), sent through the real
// HTTP server over loopback with a sync signed MDN: accepted with the
// sender's MIC, the handler reads 1 GiB from Payload.Open, and the peak
// growth of heap and RSS stays within 64 MiB.
func TestStreamedAS2GiBMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("1 GiB through the server")
	}
	const size = 1 << 30
	var got int64
	url := memoryServerWith(t, nil, drainPayload(&got, nil))
	partner, _ := demoAS2KeyPairs(t)
	const boundary = "----=_gateway_gib_7f3a9c1e5b2d4f60"
	head := "Content-Type: application/octet-stream\r\nContent-Transfer-Encoding: binary\r\nContent-Disposition: attachment; filename=cad.bin\r\n\r\n"
	// First pass: the signed part's digest (the MIC), then the signature.
	h := sha256.New()
	io.WriteString(h, head)
	if _, err := io.Copy(h, newPRNG(42, size)); err != nil {
		t.Fatal(err)
	}
	digest := h.Sum(nil)
	sig, err := cms.Sign(nil, partner.Cert, partner.Key, cms.SignOptions{Digest: "sha256", ContentDigest: digest})
	if err != nil {
		t.Fatal(err)
	}
	sigPart := "\r\n--" + boundary + "\r\nContent-Type: application/pkcs7-signature; name=smime.p7s\r\nContent-Transfer-Encoding: base64\r\n\r\n" +
		base64.StdEncoding.EncodeToString(sig) + "\r\n--" + boundary + "--\r\n"
	pre := "--" + boundary + "\r\n" + head
	length := int64(len(pre)) + size + int64(len(sigPart))
	mic := base64.StdEncoding.EncodeToString(digest)

	var rows []string
	measured(t, &rows, "AS2 signed, 1 GiB generated on the fly, streamed", func() error {
		body := io.MultiReader(strings.NewReader(pre), newPRNG(42, size), strings.NewReader(sigPart))
		req, _ := http.NewRequest(http.MethodPost, url+"/as2", body)
		req.ContentLength = length
		for k, v := range map[string]string{"AS2-From": "DEMO", "AS2-To": "GATEWAY", "AS2-Version": "1.2",
			"Message-Id": "<gib-1@demo>", "Disposition-Notification-To": "mdn@demo",
			"Disposition-Notification-Options": "signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, sha-256",
			"Content-Type":                     `multipart/signed; protocol="application/pkcs7-signature"; micalg=sha-256; boundary="` + boundary + `"`} {
			req.Header.Set(k, v)
		}
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		t.Logf("1 GiB AS2 in %s (%.0f MB/s)", time.Since(start).Round(time.Millisecond), float64(length)/time.Since(start).Seconds()/1e6)
		if resp.StatusCode != 200 || strings.Contains(string(b), "processed/error") || !strings.Contains(string(b), mic) ||
			!strings.Contains(string(b), "pkcs7-signature") {
			return fmt.Errorf("HTTP %d %.400q, want a signed MDN, processed, with MIC %s", resp.StatusCode, b, mic)
		}
		return nil
	}, true)
	if got != size {
		t.Fatalf("handler read %d payload bytes, want %d", got, size)
	}
}

// textReader is n bytes of 16-letter text from a seeded PRNG (about 2:1
// under zlib, like EDI or CSV), generated as read.
type textReader struct{ p *prngReader }

func (t textReader) Read(b []byte) (int, error) {
	n, err := t.p.Read(b)
	for i := range b[:n] {
		b[i] = "0123456789+:'ABC"[b[i]&15]
	}
	return n, err
}

// TestStreamedAS2GiBSignedCompressedEncrypted: a 1 GiB payload signed,
// then compressed, then AES-256-GCM encrypted (the layers generated as
// streams by cms.EncryptStream and cms.CompressStream from a seeded PRNG,
// nothing kept), through the real server over loopback with a sync signed
// MDN: processed with the sender's MIC, the handler reads 1 GiB, peak
// growth of heap and RSS within 64 MiB.
func TestStreamedAS2GiBSignedCompressedEncrypted(t *testing.T) {
	if testing.Short() {
		t.Skip("1 GiB through the server")
	}
	const size = 1 << 30
	var got int64
	url := memoryServerWith(t, nil, drainPayload(&got, nil))
	partner, gw := demoAS2KeyPairs(t)
	const boundary = "----=_gateway_gib_c0ffee5eed"
	head := "Content-Type: application/edi-consent\r\nContent-Transfer-Encoding: binary\r\nContent-Disposition: attachment; filename=catalogue.edi\r\n\r\n"
	h := sha256.New()
	io.WriteString(h, head)
	if _, err := io.Copy(h, textReader{newPRNG(7, size)}); err != nil {
		t.Fatal(err)
	}
	digest := h.Sum(nil)
	sig, err := cms.Sign(nil, partner.Cert, partner.Key, cms.SignOptions{Digest: "sha256", ContentDigest: digest})
	if err != nil {
		t.Fatal(err)
	}
	mic := base64.StdEncoding.EncodeToString(digest)
	signedHead := "Content-Type: multipart/signed; protocol=\"application/pkcs7-signature\"; micalg=sha-256; boundary=\"" + boundary + "\"\r\n\r\n" +
		"--" + boundary + "\r\n" + head
	sigPart := "\r\n--" + boundary + "\r\nContent-Type: application/pkcs7-signature; name=smime.p7s\r\nContent-Transfer-Encoding: base64\r\n\r\n" +
		base64.StdEncoding.EncodeToString(sig) + "\r\n--" + boundary + "--\r\n"

	var rows []string
	measured(t, &rows, "AS2 signed+compressed+GCM, 1 GiB payload generated on the fly", func() error {
		pr, pw := io.Pipe()
		go func() {
			enc, err := cms.EncryptStream(pw, []*x509.Certificate{gw.Cert}, "aes256-gcm", false)
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			io.WriteString(enc, "Content-Type: application/pkcs7-mime; smime-type=compressed-data; name=smime.p7z\r\nContent-Transfer-Encoding: binary\r\n\r\n")
			z, _ := cms.CompressStreamLevel(enc, 1)
			_, err = io.Copy(z, io.MultiReader(strings.NewReader(signedHead), textReader{newPRNG(7, size)}, strings.NewReader(sigPart)))
			if err == nil {
				err = z.Close()
			}
			if err == nil {
				err = enc.Close()
			}
			pw.CloseWithError(err)
		}()
		req, _ := http.NewRequest(http.MethodPost, url+"/as2", pr) // chunked: the length is not known in advance
		for k, v := range map[string]string{"AS2-From": "DEMO", "AS2-To": "GATEWAY", "AS2-Version": "1.2",
			"Message-Id": "<gib-2@demo>", "Disposition-Notification-To": "mdn@demo",
			"Disposition-Notification-Options": "signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, sha-256",
			"Content-Type":                     "application/pkcs7-mime; smime-type=enveloped-data; name=smime.p7m"} {
			req.Header.Set(k, v)
		}
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		t.Logf("1 GiB payload in %s (%.0f MB/s of payload)", time.Since(start).Round(time.Millisecond), float64(size)/time.Since(start).Seconds()/1e6)
		if resp.StatusCode != 200 || strings.Contains(string(b), "processed/error") || !strings.Contains(string(b), mic) ||
			!strings.Contains(string(b), "pkcs7-signature") {
			return fmt.Errorf("HTTP %d %.600q, want a signed MDN, processed, with MIC %s", resp.StatusCode, b, mic)
		}
		return nil
	}, true)
	if got != size {
		t.Fatalf("handler read %d payload bytes, want %d", got, size)
	}
}

package server

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"gateway/as2client"
	"gateway/cms"
	"gateway/config"
	"gateway/exchange"
	"gateway/smime"
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
	const size = 96 << 20 // over exchange.DefaultMaxEnvelopeBytes: the envelope scan reads payloads up to 64 MiB whole
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
	_, file, _, _ := runtime.Caller(0)
	demo := filepath.Join(filepath.Dir(file), "..", "testdata", "demo")
	read := func(p string) []byte {
		b, err := os.ReadFile(filepath.Join(demo, p))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	partner, err := cms.ParseKeyPair(read("partners/demo-partner.pem"), read("keys/demo-partner.key"))
	if err != nil {
		t.Fatal(err)
	}
	gw, err := cms.ParseKeyPair(read("keys/gateway.pem"), read("keys/gateway.key"))
	if err != nil {
		t.Fatal(err)
	}
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + ln.Addr().String()
}

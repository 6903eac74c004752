package server

import (
	"bytes"
	"context"
	"crypto/x509"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/spooltest"
)

// spoolFiles lists the regular files under dir except the areas' lock files.
func spoolFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !strings.HasSuffix(p, ".lock") {
			out = append(out, strings.TrimPrefix(p, dir+"/"))
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	return out
}

// TestSpoolFilesLiveOnlyDuringTheExchange: on both endpoints the message's
// spool files (the AS2 body as it arrived, payloads over the spool
// threshold) are in spool_dir while the handler runs and gone (or, body
// files, emptied for reuse) once the partner has its answer; spool files a crashed run left in spool_dir are
// removed when the server starts.
func TestSpoolFilesLiveOnlyDuringTheExchange(t *testing.T) {
	cfg := demoConfig(t)
	cfg.Partners = plainDemoPartners(t)
	cfg.SpoolDir = t.TempDir()
	crashed := filepath.Join(cfg.SpoolDir, "gateway-spool.1234")
	if err := os.MkdirAll(crashed, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(crashed, "gateway-body-99"), []byte("killed mid-exchange"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if left := spoolFiles(t, cfg.SpoolDir); len(left) != 0 {
		t.Fatalf("after start, spool_dir still holds %v", left)
	}
	var during []string
	s.SetHandler(exchange.HandlerFunc(func(ctx context.Context, m *exchange.Message) error {
		during = spoolFiles(t, cfg.SpoolDir)
		return nil
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	defer func() { cancel(); <-done }()
	url := "http://" + ln.Addr().String()

	partner, gw := demoAS2KeyPairs(t)
	payload := bytes.Repeat([]byte("price list line 0123456789\n"), (5<<20)/27)

	c := &as2client.Client{URL: url + "/as2", From: "DEMO", To: "GATEWAY", SignCert: partner.Cert, SignKey: partner.Key, SignDigest: "sha256",
		RecipientCerts: []*x509.Certificate{gw.Cert}, Cipher: "aes256-cbc", MDN: as2client.MDNSync}
	m, err := c.Prepare(payload, "application/edi-consent", "big.edi")
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Send(context.Background(), m)
	if err != nil || !res.OK() {
		t.Fatalf("AS2: %v %+v", err, res)
	}
	// Over the stream threshold: the payload is the last layer file of the
	// streamed unwrap.
	if !hasPrefixed(during, "gateway-body-") || !hasPrefixed(during, "gateway-layer-") {
		t.Errorf("AS2: spool files during the handler %v, want the body and the payload's layer file", during)
	}
	if left := spooltest.LeftoversAfter(t, cfg.SpoolDir, 5*time.Second); len(left) != 0 {
		t.Errorf("AS2: spool files left after the exchange: %v", left)
	}

	during = nil
	out, err := demoAS4Client(t).Build(&client.Message{
		MessageID: "spool@demo.test",
		From:      as4.PartyID{Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered", Value: "urn:demo:partner"},
		To:        as4.PartyID{Type: "urn:oasis:names:tc:ebcore:partyid-type:unregistered", Value: "urn:demo:gateway"},
		Service:   "urn:demo:invoicing", Action: "Deliver",
		Payloads: []client.Payload{{MimeType: "application/edifact", Data: payload}},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url+"/as4", out.ContentType, bytes.NewReader(out.Body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "Receipt") {
		t.Fatalf("AS4: HTTP %d %.300q", resp.StatusCode, b)
	}
	if !hasPrefixed(during, "gateway-spool-") {
		t.Errorf("AS4: spool files during the handler %v, want the payload", during)
	}
	if left := spooltest.LeftoversAfter(t, cfg.SpoolDir, 5*time.Second); len(left) != 0 {
		t.Errorf("AS4: spool files left after the exchange: %v", left)
	}
}

func hasPrefixed(files []string, prefix string) bool {
	for _, f := range files {
		if strings.HasPrefix(filepath.Base(f), prefix) {
			return true
		}
	}
	return false
}

package transmit_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/server"
)

// fixtureDir is testdata/fixture: the demo partner's key (ours in these
// tests: we send as the partner "demo") and the gateway's (the partner we
// send to).
func fixtureDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "fixture")
}

func keyPair(t testing.TB, cert, key string) cms.KeyPair {
	t.Helper()
	c, err := os.ReadFile(filepath.Join(fixtureDir(), cert))
	if err != nil {
		t.Fatal(err)
	}
	k, err := os.ReadFile(filepath.Join(fixtureDir(), key))
	if err != nil {
		t.Fatal(err)
	}
	kp, err := cms.ParseKeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// ours is the demo partner's key pair (we send as it); theirs the
// gateway's (the receiving partner's).
func ours(t testing.TB) cms.KeyPair {
	return keyPair(t, "partners/demo-partner.pem", "keys/demo-partner.key")
}
func theirs(t testing.TB) cms.KeyPair { return keyPair(t, "keys/gateway.pem", "keys/gateway.key") }

// served is a gateway served over loopback (package server), acting as
// the partner the transmitters send to, with what its handler received.
type served struct {
	URL string
	mu  sync.Mutex
	got []receivedPayload
	// fail makes the handler fail this many more times.
	fail int
}

// failNext makes the handler fail the next n messages.
func (s *served) failNext(n int) {
	s.mu.Lock()
	s.fail = n
	s.mu.Unlock()
}

type receivedPayload struct {
	n   int64
	sum string
	// props are the part's eb:PartProperties as the gateway read them.
	props map[string]string
}

func (s *served) received() []receivedPayload {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]receivedPayload(nil), s.got...)
}

// gatewayOptions tune the served gateway's partner file (demo).
type gatewayOptions struct {
	// as2 and as4 are appended to the partner's sections (indented).
	as2, as4 string
	// cert and key are the gateway's identity key pair files (default the
	// fixture's gateway.pem and gateway.key): it signs its MDNs and
	// receipts with it.
	cert, key string
}

// serveGateway serves the fixture gateway (identity GATEWAY,
// urn:demo:gateway) with an in-memory store and one partner "demo" (us),
// its partner file extended by o.
func serveGateway(t testing.TB, o gatewayOptions) *served {
	t.Helper()
	dir := t.TempDir()
	pdir := filepath.Join(dir, "partners")
	if err := os.Mkdir(pdir, 0o755); err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(filepath.Join(fixtureDir(), "partners", "demo-partner.pem"))
	if err != nil {
		t.Fatal(err)
	}
	partner := "id: demo\non_drift: reject\nas2:\n  as2_id: DEMO\n  certificates: [demo-partner.pem]\n  duplicate_disposition: warning\n" + o.as2 +
		"as4:\n  party_id: urn:demo:partner\n  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered\n  certificates: [demo-partner.pem]\n" +
		"  pmodes:\n    - id: demo-invoice\n      service: urn:demo:invoicing\n      action: Deliver\n" + o.as4
	if o.cert == "" {
		o.cert, o.key = filepath.Join(fixtureDir(), "keys", "gateway.pem"), filepath.Join(fixtureDir(), "keys", "gateway.key")
	}
	gw := "listen: 127.0.0.1:0\nadmin:\n  listen: 127.0.0.1:0\nstore: \"memory:\"\npartners: partners\nquarantine_dir: quarantine\n" +
		"spool_dir: spool\nidentity:\n  as2_id: GATEWAY\n  party_id: urn:demo:gateway\n  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered\n" +
		"  keys:\n    - cert: " + o.cert + "\n      key: " + o.key + "\n" +
		"handler: {type: dir, inbox: inbox}\naudit:\n  file: audit.jsonl\nshutdown_timeout: 2s\ndrain_period: 0s\n"
	for name, text := range map[string]string{"gateway.yaml": gw, "partners/demo.yaml": partner, "partners/demo-partner.pem": string(pem)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Load(filepath.Join(dir, "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	s := &served{}
	srv.SetHandler(exchange.HandlerFunc(func(ctx context.Context, m *exchange.Message) error {
		s.mu.Lock()
		fail := s.fail > 0
		s.fail--
		s.mu.Unlock()
		if fail {
			return errors.New("the business system is down")
		}
		rc, err := m.Payloads[0].Open()
		if err != nil {
			return err
		}
		defer rc.Close()
		h := sha256.New()
		n, err := io.Copy(h, rc)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.got = append(s.got, receivedPayload{n, hex.EncodeToString(h.Sum(nil)), m.Payloads[0].Properties})
		s.mu.Unlock()
		return nil
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	s.URL = "http://" + ln.Addr().String()
	return s
}

// attempt runs one Transmit of m with payload, recording the digests
// posted in m.Sent (as the Sender does with Store.Posting).
func attempt(t testing.TB, tr outbound.Transmitter, m *outbound.Message, payload []byte) outbound.Attempt {
	t.Helper()
	open := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(payload)), nil }
	return attemptOpen(t, tr, m, open)
}

func attemptOpen(t testing.TB, tr outbound.Transmitter, m *outbound.Message, open func() (io.ReadCloser, error)) outbound.Attempt {
	t.Helper()
	a := tr.Transmit(context.Background(), *m, open, func(digest string) error {
		if digest == "" {
			t.Error("empty digest posted")
		}
		m.Attempts++
		for _, d := range m.Sent {
			if d == digest {
				return nil
			}
		}
		m.Sent = append(m.Sent, digest)
		return nil
	})
	t.Logf("attempt %d: outcome %d status %d reason %q", m.Attempts, a.Outcome, a.Status, a.Reason)
	return a
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func certs(c ...*x509.Certificate) []*x509.Certificate { return c }

func contains(s, sub string) bool { return strings.Contains(strings.ToLower(s), strings.ToLower(sub)) }

package server

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/smime"
	"github.com/edigateway/gateway/internal/testpki"
	"github.com/edigateway/gateway/internal/testrelay"
	"github.com/edigateway/gateway/outbound"
)

// sendIdentityFixture is a sending gateway S with two identities (GW /
// urn:gw, key gw1; GW2 / urn:gw2, key gw2) and a receiving gateway R
// with two (R1 / urn:r1, R2 / urn:r2). S's partner p1 is R as R1, which
// knows us as GW / urn:gw with gw1's certificate only; p2 is R as R2,
// which knows us as GW2 / urn:gw2 with gw2's certificate only
// (as2.our_as2_id: GW2, as4.send.from_party_id: urn:gw2).
type sendIdentityFixture struct {
	dir   string
	certs map[string]*x509.Certificate
	keys  map[string]cms.KeyPair
	s     *Server
	// got maps a payload R's handler received to the partner (of R) it
	// came from; raw holds what reached R's AS2 and AS4 endpoints.
	mu  sync.Mutex
	got map[string]string
	raw []capturedRequest
}

type capturedRequest struct {
	path string
	h    http.Header
	body []byte
}

func writeFiles(t *testing.T, files map[string]string) {
	t.Helper()
	for path, body := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// serveGateway serves s on loopback until the test ends; it returns the
// base URL.
func serveGateway(t *testing.T, s *Server) string {
	t.Helper()
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

const gatewayTail = "handler: {type: dir, inbox: inbox}\nquarantine_dir: quarantine\nshutdown_timeout: 2s\ndrain_period: 0s\n" +
	"reload_on_change: false\nadmin:\n  listen: 127.0.0.1:0\n"

func newSendIdentityFixture(t *testing.T) *sendIdentityFixture {
	f := &sendIdentityFixture{dir: t.TempDir(), certs: map[string]*x509.Certificate{}, keys: map[string]cms.KeyPair{}, got: map[string]string{}}
	names := []string{"gw1", "gw2", "r1", "r2", "gw3"}
	keys := testpki.RSAKeys(t, len(names))
	for i, n := range names {
		c := testpki.SelfSigned(t, keys[i], testpki.Cert{CommonName: n, Serial: int64(i + 1)})
		testpki.WriteKeyPair(t, f.dir, n, c, keys[i])
		kp, err := cms.ParseKeyPair(testpki.CertPEM(c), testpki.KeyPEM(t, keys[i]))
		if err != nil {
			t.Fatal(err)
		}
		f.certs[n], f.keys[n] = c, kp
	}
	pem := func(n string) string { return string(testpki.CertPEM(f.certs[n])) }
	key := func(n string) string {
		return "{cert: " + filepath.Join(f.dir, n+".crt") + ", key: " + filepath.Join(f.dir, n+".key") + "}"
	}
	pmode := "  pmodes: [{id: inv, service: urn:invoicing, action: Deliver}]\n"

	// R: us1 is S as GW / urn:gw (gw1 only), us2 S as GW2 / urn:gw2
	// (gw2, and gw3 for the rollover).
	r := filepath.Join(f.dir, "r")
	writeFiles(t, map[string]string{
		filepath.Join(r, "gateway.yaml"): "store: sqlite:r.db\npartners: partners\nidentity:\n  as2_id: R1\n  party_id: urn:r1\n  keys: [" + key("r1") + "]\n" +
			"identities:\n  - as2_id: R2\n    party_id: urn:r2\n    keys: [" + key("r2") + "]\n" + gatewayTail,
		filepath.Join(r, "partners", "gw1.pem"): pem("gw1"),
		filepath.Join(r, "partners", "gw2.pem"): pem("gw2") + pem("gw3"),
		filepath.Join(r, "partners", "us1.yaml"): "id: us1\nas2:\n  as2_id: GW\n  certificates: [gw1.pem]\n" +
			"as4:\n  party_id: urn:gw\n  certificates: [gw1.pem]\n" + pmode,
		filepath.Join(r, "partners", "us2.yaml"): "id: us2\nas2:\n  as2_id: GW2\n  our_as2_id: R2\n  certificates: [gw2.pem]\n" +
			"as4:\n  party_id: urn:gw2\n  certificates: [gw2.pem]\n" + pmode,
	})
	rcfg, err := config.Load(filepath.Join(r, "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := New(context.Background(), rcfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	rs.SetHandler(exchange.HandlerFunc(func(ctx context.Context, m *exchange.Message) error {
		rc, err := m.Payloads[0].Open()
		if err != nil {
			return err
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			return err
		}
		f.mu.Lock()
		f.got[string(b)] = m.Partner
		f.mu.Unlock()
		return nil
	}))
	rURL := serveGateway(t, rs)
	// In front of R: a copy of every request, for the checks.
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.raw = append(f.raw, capturedRequest{req.URL.Path, req.Header.Clone(), body})
		f.mu.Unlock()
		testrelay.Forward(w, req, rURL+req.URL.Path, body)
	}))
	t.Cleanup(front.Close)

	// S: p1 is R1, p2 is R2 (which knows us as GW2 / urn:gw2).
	s := filepath.Join(f.dir, "s")
	send := func(path string) string {
		return "  send: {url: \"" + front.URL + path + "\", retry: {first: 1s, max: 1s}"
	}
	writeFiles(t, map[string]string{
		filepath.Join(s, "gateway.yaml"): "store: sqlite:s.db\npartners: partners\nidentity:\n  as2_id: GW\n  party_id: urn:gw\n  keys: [" + key("gw1") + "]\n" +
			"identities:\n  - as2_id: GW2\n    party_id: urn:gw2\n    keys: [{cert: " + filepath.Join(f.dir, "s", "gw2.crt") + ", key: " + filepath.Join(f.dir, "s", "gw2.key") + "}]\n" + gatewayTail,
		filepath.Join(s, "gw2.crt"):            pem("gw2"),
		filepath.Join(s, "gw2.key"):            string(testpki.KeyPEM(t, keys[1])),
		filepath.Join(s, "partners", "r1.pem"): pem("r1"),
		filepath.Join(s, "partners", "r2.pem"): pem("r2"),
		filepath.Join(s, "partners", "p1.yaml"): "id: p1\nas2:\n  as2_id: R1\n  certificates: [r1.pem]\n" + send("/as2") + "}\n" +
			"as4:\n  party_id: urn:r1\n  certificates: [r1.pem]\n" + pmode + send("/as4") + ", pmode: {id: inv}}\n",
		filepath.Join(s, "partners", "p2.yaml"): "id: p2\nas2:\n  as2_id: R2\n  our_as2_id: GW2\n  certificates: [r2.pem]\n" + send("/as2") + "}\n" +
			"as4:\n  party_id: urn:r2\n  certificates: [r2.pem]\n" + pmode + send("/as4") + ", pmode: {id: inv}, from_party_id: urn:gw2}\n",
	})
	scfg, err := config.Load(filepath.Join(s, "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	f.s, err = New(context.Background(), scfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.s.Close() })
	serveGateway(t, f.s)
	return f
}

// send queues payload for partner with proto and waits until the message
// is final.
func (f *sendIdentityFixture) send(t *testing.T, partner string, proto outbound.Protocol, payload string) outbound.Message {
	t.Helper()
	ctx := context.Background()
	m, _, err := f.s.Submit(ctx, outbound.Submission{Partner: partner, Protocol: proto, Payload: strings.NewReader(payload)})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := f.s.Outbound().Get(ctx, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State.Final() || time.Now().After(deadline) || got.Attempts >= 2 && got.LastError != "" {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// as2Request is the AS2 request R received whose Message-ID is id.
func (f *sendIdentityFixture) as2Request(t *testing.T, id string) capturedRequest {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.raw {
		if r.path == "/as2" && r.h.Get("Message-Id") == id {
			return r
		}
	}
	t.Fatalf("no AS2 request with Message-ID %s reached R", id)
	return capturedRequest{}
}

// verifiesWith reports whether the signature of the AS2 request r
// (encrypted for rkey) verifies with cert.
func verifiesWith(r capturedRequest, rkey cms.KeyPair, cert *x509.Certificate) error {
	raw := append([]byte("Content-Type: "+r.h.Get("Content-Type")+"\r\n\r\n"), r.body...)
	res, err := smime.Unwrap(raw, smime.Options{Keys: []cms.KeyPair{rkey}, Trusted: []*x509.Certificate{cert}})
	if err != nil {
		return err
	}
	if !res.Signed {
		return fmt.Errorf("not signed")
	}
	return nil
}

// TestSendAsTheIdentityThePartnerKnows: a gateway with two identities
// sends to p2, which knows it as the second one (as2.our_as2_id: GW2,
// as4.send.from_party_id: urn:gw2), as GW2 / urn:gw2: AS2-From, eb:From
// and the Message-ID are GW2's and the signature verifies with GW2's
// certificate, not GW's (the receiver, which knows only GW2's certificate
// for GW2, delivers both); p1 gets the first identity, as before. A key of
// the second identity rolled over by a reload signs the next message.
func TestSendAsTheIdentityThePartnerKnows(t *testing.T) {
	f := newSendIdentityFixture(t)
	type sent struct {
		partner string
		proto   outbound.Protocol
		as      string // the partner of R the message reached
	}
	msgs := map[string]outbound.Message{}
	for _, c := range []sent{{"p1", outbound.AS2, "us1"}, {"p1", outbound.AS4, "us1"}, {"p2", outbound.AS2, "us2"}, {"p2", outbound.AS4, "us2"}} {
		payload := fmt.Sprintf("invoice for %s by %s", c.partner, c.proto)
		m := f.send(t, c.partner, c.proto, payload)
		msgs[c.partner+string(c.proto)] = m
		if m.State != outbound.Delivered {
			t.Errorf("%s %s: %s after %d attempts: %s %s", c.partner, c.proto, m.State, m.Attempts, m.LastError, m.Reason)
			continue
		}
		f.mu.Lock()
		from := f.got[payload]
		f.mu.Unlock()
		if from != c.as {
			t.Errorf("%s %s: R received it from its partner %q, want %q", c.partner, c.proto, from, c.as)
		}
	}
	if t.Failed() {
		return
	}
	// AS2: AS2-From, the Message-ID's host and the signer are the
	// identity's.
	for _, c := range []struct {
		partner, from, host, rkey, signer, other string
	}{{"p1", "GW", "@GW>", "r1", "gw1", "gw2"}, {"p2", "GW2", "@GW2>", "r2", "gw2", "gw1"}} {
		m := msgs[c.partner+string(outbound.AS2)]
		r := f.as2Request(t, m.MessageID)
		if got := r.h.Get("AS2-From"); got != c.from || !strings.HasSuffix(m.MessageID, c.host) {
			t.Errorf("%s: AS2-From %q, Message-ID %s; want %s", c.partner, got, m.MessageID, c.from)
		}
		if err := verifiesWith(r, f.keys[c.rkey], f.certs[c.signer]); err != nil {
			t.Errorf("%s: the signature does not verify with %s's certificate: %v", c.partner, c.signer, err)
		}
		if err := verifiesWith(r, f.keys[c.rkey], f.certs[c.other]); err == nil {
			t.Errorf("%s: the signature verifies with %s's certificate", c.partner, c.other)
		}
	}
	// AS4: eb:From and the eb:MessageId's host.
	f.mu.Lock()
	for _, r := range f.raw {
		if r.path != "/as4" {
			continue
		}
		body := string(r.body)
		switch {
		case strings.Contains(body, msgs["p1as4"].MessageID):
			if !strings.Contains(body, ">urn:gw</") || strings.Contains(body, "urn:gw2") {
				t.Errorf("p1's AS4 message is not from urn:gw only")
			}
		case strings.Contains(body, msgs["p2as4"].MessageID):
			if !strings.Contains(body, ">urn:gw2</") || strings.Contains(body, ">urn:gw</") || !strings.HasSuffix(msgs["p2as4"].MessageID, "@urngw2") {
				t.Errorf("p2's AS4 message is not from urn:gw2 (eb:MessageId %s)", msgs["p2as4"].MessageID)
			}
		}
	}
	f.mu.Unlock()

	// A rollover of GW2's key (gw3 in its files) applies to the next
	// message to p2 after a reload; p1 still gets gw1's signature.
	s := filepath.Join(f.dir, "s")
	writeFiles(t, map[string]string{
		filepath.Join(s, "gw2.crt"): string(testpki.CertPEM(f.certs["gw3"])),
		filepath.Join(s, "gw2.key"): string(testpki.KeyPEM(t, testpki.RSAKey(t, 4))), // gw3's
	})
	if err := f.s.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ partner, rkey, signer, other string }{{"p2", "r2", "gw3", "gw2"}, {"p1", "r1", "gw1", "gw3"}} {
		m := f.send(t, c.partner, outbound.AS2, "invoice after the rollover for "+c.partner)
		if m.State != outbound.Delivered {
			t.Fatalf("%s after the rollover: %s: %s %s", c.partner, m.State, m.LastError, m.Reason)
		}
		r := f.as2Request(t, m.MessageID)
		if err := verifiesWith(r, f.keys[c.rkey], f.certs[c.signer]); err != nil {
			t.Errorf("%s after the rollover: the signature does not verify with %s's certificate: %v", c.partner, c.signer, err)
		}
		if err := verifiesWith(r, f.keys[c.rkey], f.certs[c.other]); err == nil {
			t.Errorf("%s after the rollover: the signature verifies with %s's certificate", c.partner, c.other)
		}
	}
}

// TestSendIdentityNamedNoneOfOursRefused: the file of a partner we send to
// whose as2.our_as2_id or as4.send.from_party_id names none of our
// identities is refused by a reload (the running directory stays: p2 still sends as
// GW2) and at start, naming the file and the key.
func TestSendIdentityNamedNoneOfOursRefused(t *testing.T) {
	f := newSendIdentityFixture(t)
	s := filepath.Join(f.dir, "s")
	bad := filepath.Join(s, "partners", "p3.yaml")
	writeFiles(t, map[string]string{bad: "id: p3\nas2:\n  as2_id: R3\n  our_as2_id: GW9\n  certificates: [r1.pem]\n  send: {url: \"https://r3.example/as2\"}\n" +
		"as4:\n  party_id: urn:r3\n  certificates: [r1.pem]\n  pmodes: [{id: inv}]\n  send: {url: \"https://r3.example/as4\", from_party_id: urn:gw9}\n"})
	wants := []string{
		bad + `: as2.our_as2_id: "GW9" is the as2_id of none of our identities (identity, identities[]: "GW", "GW2")`,
		bad + `: as4.send.from_party_id: "urn:gw9" is the party_id of none of our identities (identity, identities[]: "urn:gw", "urn:gw2")`,
	}
	err := f.s.Reload(context.Background())
	for _, want := range wants {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("reload: %v\nwant %q", err, want)
		}
	}
	if m := f.send(t, "p2", outbound.AS2, "invoice after the refused reload"); m.State != outbound.Delivered || !strings.HasSuffix(m.MessageID, "@GW2>") {
		t.Errorf("p2 after the refused reload: %s %s %s", m.State, m.MessageID, m.LastError)
	}
	cfg, err := config.Load(filepath.Join(s, "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store = "sqlite:" + filepath.Join(t.TempDir(), "other.db")
	s2, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err == nil {
		s2.Close()
	}
	for _, want := range wants {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("start: %v\nwant %q", err, want)
		}
	}
}

package transmit_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/endpoint"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/brainpool/bptest"
	"github.com/edigateway/gateway/internal/transmit"
	"github.com/edigateway/gateway/internal/xmlenc"
	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/partners"
)

// A message sent with the BDEW profile (brainpoolP256r1 keys made by
// openssl, PKIPath token, ECDH-ES for the recipient named by X509SKI, an
// empty eb:ConversationId, gzip) is accepted by our AS4 endpoint with a
// bdew partner and delivered on its signed receipt; a message with a
// conversation id is not sent.
func TestAS4BDEWAcceptedByOurReceiver(t *testing.T) {
	pki := bptest.New(t)
	gw, sw := pki.Party("9900000000001"), pki.Party("9900000000002")
	pdir := t.TempDir()
	for name, file := range map[string]string{"sw.pem": sw.Signing.CertFile, "sw-tls.pem": sw.TLS.CertFile} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pdir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	yaml := "id: stadtwerke\nas4:\n  profile: bdew\n  party_id: \"9900000000002\"\n  certificates: [sw.pem]\n  tls_certificates: [sw-tls.pem]\n" +
		"  pmodes:\n    - id: mp\n      agreement: " + partners.BDEWAgreement + "\n"
	if err := os.WriteFile(filepath.Join(pdir, "sw.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := partners.Load(pdir)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var delivered []*exchange.Message
	var lastBody []byte
	pl := &exchange.Pipeline{Store: dedup.NewMemoryStore(dedup.Options{Lease: time.Minute}), Log: slog.New(slog.DiscardHandler),
		Handler: exchange.HandlerFunc(func(ctx context.Context, m *exchange.Message) error {
			rc, err := m.Payloads[0].Open()
			if err != nil {
				return err
			}
			defer rc.Close()
			b, err := io.ReadAll(rc)
			if err != nil || string(b) != edi {
				return fmt.Errorf("payload %q %v", b, err)
			}
			mu.Lock()
			delivered = append(delivered, m)
			mu.Unlock()
			return nil
		})}
	sig, err := endpoint.LoadKeyPair(gw.Signing.CertFile, gw.Signing.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := endpoint.LoadKeyPair(gw.Encrypt.CertFile, gw.Encrypt.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := endpoint.New(endpoint.Config{Partners: d, Keys: []xmlenc.KeyPair{sig, enc}, Pipeline: pl,
		PartyID: gw.ID, PartyType: partners.PartyTypeGLN, Log: slog.New(slog.DiscardHandler),
		ClientCertHeader: "X-SSL-Client-Cert", TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	// The profile requires mutual TLS, which Go's TLS cannot do with
	// brainpool certificates: a TLS-terminating proxy in front of the
	// endpoint forwards the partner's verified TLS certificate.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("X-SSL-Client-Cert", base64.StdEncoding.EncodeToString(sw.TLS.Cert.Raw))
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		lastBody = body
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		ep.ServeHTTP(w, r)
	}))
	defer srv.Close()

	id := transmit.Identity{PartyID: sw.ID, PartyType: partners.PartyTypeGLN, Cert: sw.Signing.Cert, Key: sw.Signing.Key}
	tr := transmit.NewAS4(func(string) (transmit.Identity, error) { return id, nil }, func(string) (*transmit.AS4Settings, error) {
		return &transmit.AS4Settings{URL: srv.URL, To: as4.PartyID{Value: gw.ID, Type: partners.PartyTypeGLN},
			From:         as4.PartyID{Value: sw.ID, Type: partners.PartyTypeGLN},
			AgreementRef: partners.BDEWAgreement, Service: "https://www.bdew.de/as4/communication/services/MP",
			Action: "http://docs.oasis-open.org/ebxml-msg/as4/200902/action", Profile: transmit.ProfileBDEW,
			ReceiptSigners: certs(gw.Signing.Cert), EncryptTo: gw.Encrypt.Cert, ReceiptRequired: true}, nil
	}, t.TempDir())
	mid, err := transmit.NewMessageID(outbound.AS4, id)
	if err != nil {
		t.Fatal(err)
	}
	// The BDEW part properties a queued message may carry (none is
	// required by the profile).
	bdewProps := []outbound.Property{{Name: "BDEWDocumentType", Value: "UTILMD"}, {Name: "BDEWDocumentNo", Value: "4711"},
		{Name: "BDEWDocumentDate", Value: "2026-12-05"}, {Name: "BDEWFulfillmentDate", Value: "2026-12-31"},
		{Name: "BDEWSubjectPartyID", Value: "9900000000003"}, {Name: "BDEWSubjectPartyRole", Value: "LF"},
		{Name: "BDEWApplicationReference", Value: "UTILMD-55001"}}
	m := &outbound.Message{Partner: "stadtwerke", Protocol: outbound.AS4, MessageID: mid, ContentType: "application/edifact",
		Properties: bdewProps}
	a := attempt(t, tr, m, []byte(edi))
	if a.Outcome != outbound.Deliver || a.Evidence == nil || a.Evidence.Kind != "receipt" {
		t.Fatalf("attempt %+v", a)
	}
	mu.Lock()
	sent, got := string(lastBody), delivered
	mu.Unlock()
	if len(got) != 1 || got[0].MessageID != mid {
		t.Fatalf("delivered %d messages", len(got))
	}
	for _, p := range bdewProps {
		if v := got[0].Payloads[0].Properties[p.Name]; v != p.Value {
			t.Errorf("the receiver read %s = %q, want %q", p.Name, v, p.Value)
		}
	}
	for _, want := range []string{"<eb:ConversationId/>", "X509PKIPathv1", "X509SKI", "application/gzip"} {
		if !strings.Contains(sent, want) {
			t.Errorf("the message has no %s", want)
		}
	}

	m2 := &outbound.Message{Partner: "stadtwerke", Protocol: outbound.AS4, MessageID: "bdew-2@" + sw.ID, ConversationID: "c-1"}
	if a := attempt(t, tr, m2, []byte(edi)); a.Outcome != outbound.Refuse || !contains(a.Reason, "ConversationId") || m2.Attempts != 0 {
		t.Fatalf("with a conversation id: %+v", a)
	}
}

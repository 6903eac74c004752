package endpoint_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/as4/endpoint"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/xmlenc"
)

// panicWatch fails the fuzz run when the endpoint had to recover a panic
// (the endpoint turns panics into error signals, which would hide them).
type panicWatch struct {
	mu     sync.Mutex
	panics []string
}

func (p *panicWatch) Enabled(context.Context, slog.Level) bool { return true }
func (p *panicWatch) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "as4 endpoint panic" {
		p.mu.Lock()
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "panic" {
				p.panics = append(p.panics, a.Value.String())
			}
			return true
		})
		p.mu.Unlock()
	}
	return nil
}
func (p *panicWatch) WithAttrs([]slog.Attr) slog.Handler { return p }
func (p *panicWatch) WithGroup(string) slog.Handler      { return p }

// FuzzEndpoint feeds arbitrary bodies (under a multipart or a bare SOAP
// Content-Type) through the whole request path: the answer is always a
// well-formed HTTP reply with a status the endpoint documents, never a
// panic, and nothing unverified reaches the handler.
func FuzzEndpoint(f *testing.F) {
	k := getKeys(f)
	c := rsaClient(k)
	signedOnly := rsaClient(k)
	signedOnly.Encryption = nil
	for i, cl := range []*client.Client{c, signedOnly} {
		m := testMessage("fuzz-seed@acme.test")
		m.Payloads[1].Data = m.Payloads[1].Data[:64]
		if i == 1 {
			m.Payloads = m.Payloads[:1]
		}
		out, err := cl.Build(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(out.ContentType, out.Body)
	}
	f.Add("application/soap+xml", []byte(`<S:Envelope xmlns:S="http://www.w3.org/2003/05/soap-envelope"><S:Header/><S:Body/></S:Envelope>`))
	f.Add("multipart/related; boundary=b", []byte("--b\r\nContent-Type: application/soap+xml\r\n\r\n<x/>\r\n--b--\r\n"))

	dir := loadPartners(f, defaultPartners(f, k))
	watch := &panicWatch{}
	var delivered sync.Map
	pl := &exchange.Pipeline{Store: dedup.NewMemoryStore(dedup.Options{Lease: time.Minute}), Log: slog.New(slog.DiscardHandler),
		Handler: exchange.HandlerFunc(func(ctx context.Context, m *exchange.Message) error {
			delivered.Store(m.MessageID, true)
			return nil
		})}
	// Signals are signed with Ed25519 here: an RSA signature per answer
	// would make every execution (and the minimisation of every new
	// input) slow. The RSA key still decrypts.
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	edSigner, err := selfSigned("gateway fuzz signer", 201, edKey)
	if err != nil {
		f.Fatal(err)
	}
	ep, err := endpoint.New(endpoint.Config{Partners: dir, Keys: []xmlenc.KeyPair{edSigner, k.gatewayRSA, k.gatewayX25519}, Pipeline: pl,
		PartyID: gatewayParty.Value, PartyType: gatewayParty.Type, Log: slog.New(watch),
		Limits: as4.Limits{MaxMessageSize: 1 << 20}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/as4", bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		rec := httptest.NewRecorder()
		ep.ServeHTTP(rec, req)
		watch.mu.Lock()
		panics := watch.panics
		watch.mu.Unlock()
		if len(panics) > 0 {
			t.Fatalf("endpoint recovered a panic: %s", panics[0])
		}
		switch rec.Code {
		case http.StatusOK, http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d", rec.Code)
		}
		if rec.Code == http.StatusOK && !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/soap+xml") {
			t.Fatalf("200 without a SOAP signal: %q", rec.Header().Get("Content-Type"))
		}
		delivered.Range(func(id, _ any) bool {
			if id != "fuzz-seed@acme.test" {
				t.Fatalf("a mutated message %q reached the handler", id)
			}
			return true
		})
	})
}

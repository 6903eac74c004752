package endpoint

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/xmlenc"
	"github.com/edigateway/gateway/partners"
)

// TestEveryFailureKindHasAnEbMSError: every exchange.FailureKind gets a
// signed EBMS:0004 naming the reason and the incident, retryable (HTTP 500)
// only for a handler failure. A kind added to exchange without a mapping
// fails here (it used to end as HTTP 500 "unknown failure kind").
func TestEveryFailureKindHasAnEbMSError(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gateway"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	e, err := New(Config{Partners: &partners.Directory{}, Pipeline: &exchange.Pipeline{}, Keys: []xmlenc.KeyPair{{Cert: cert, Key: key}}})
	if err != nil {
		t.Fatal(err)
	}
	r := &replies{e: e, um: &as4.UserMessage{MessageInfo: as4.MessageInfo{MessageID: "m1@acme.test"}}}
	for _, k := range exchange.FailureKinds() {
		rep, err := r.Failed(context.Background(), &exchange.Failure{Kind: k, Err: errors.New("internal detail"),
			Reason: "reason of " + k.String(), Incident: "GW-7K3QX9"})
		if err != nil {
			t.Errorf("%s: %v", k, err)
			continue
		}
		body := string(rep.Body)
		wantStatus := http.StatusOK
		if k == exchange.HandlerFailed {
			wantStatus = http.StatusInternalServerError
		}
		if rep.Disposition != as4.CodeOther || rep.Status != wantStatus || !strings.Contains(body, `severity="failure"`) ||
			!strings.Contains(body, "GW-7K3QX9") || strings.Contains(body, "internal detail") ||
			(k != exchange.HandlerFailed && !strings.Contains(body, "reason of "+k.String())) {
			t.Errorf("%s: %s HTTP %d\n%s", k, rep.Disposition, rep.Status, body)
		}
	}
}

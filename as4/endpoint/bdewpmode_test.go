package endpoint_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/endpoint"
	"github.com/edigateway/gateway/receipt"
)

// TestBDEWPayloadWithoutGzipIsRefused: the BDEW P-Mode prescribes gzip
// compression of every payload; an uncompressed one is refused with
// EBMS:0010 (it was delivered).
func TestBDEWPayloadWithoutGzipIsRefused(t *testing.T) {
	s := newBDEW(t)
	m := s.message("uncompressed@9900000000002")
	m.Payloads[0].Compress = false
	_, _, err := s.client.Send(context.Background(), s.url, m)
	var se *receipt.SignalError
	if !errors.As(err, &se) || se.Errors[0].Code != as4.CodeProcessingModeMismatch || !strings.Contains(se.Errors[0].Detail, "application/gzip") {
		t.Fatalf("uncompressed payload: %v", err)
	}
	if _, _, err := s.client.Send(context.Background(), s.url, s.message("compressed@9900000000002")); err != nil {
		t.Fatalf("compressed payload: %v", err)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

// twoHeaders sends the header twice (a client's own value, then the
// proxy's appended one).
type twoHeaders struct{ name, first, second string }

func (h twoHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Add(h.name, h.first)
	r.Header.Add(h.name, h.second)
	return http.DefaultTransport.RoundTrip(r)
}

// TestTwoClientCertificateHeadersAreRefused: a request from the trusted
// proxy with the client certificate header twice is answered 400 with an
// incident reference, for a bdew partner and for any other (the first
// header won).
func TestTwoClientCertificateHeadersAreRefused(t *testing.T) {
	t.Run("bdew partner", func(t *testing.T) {
		s := newBDEW(t)
		own := base64.StdEncoding.EncodeToString(s.sw.TLS.Cert.Raw)
		other := base64.StdEncoding.EncodeToString(s.gw.TLS.Cert.Raw)
		cl := *s.client
		cl.HTTP = &http.Client{Transport: twoHeaders{clientCertHeader, own, other}}
		_, resp, err := cl.Send(context.Background(), s.url, s.message("two-headers@9900000000002"))
		if resp == nil {
			t.Fatalf("no answer: %v", err)
		}
		twoHeadersRefused(t, resp.Status, resp.Body, err)
		if s.calls.Load() != 0 {
			t.Fatal("delivered")
		}
	})
	t.Run("partner without a profile", func(t *testing.T) {
		k := getKeys(t)
		h := newHarness(t, harnessOptions{configure: func(c *endpoint.Config) {
			c.ClientCertHeader, c.TrustedProxies = clientCertHeader, loopback
		}})
		c := rsaClient(k)
		out, err := c.Build(testMessage("two-headers@acme.test"))
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, h.url, bytes.NewReader(out.Body))
		req.Header.Set("Content-Type", out.ContentType)
		cert := base64.StdEncoding.EncodeToString(k.partnerRSA.Cert.Raw)
		hr, err := (&http.Client{Transport: twoHeaders{clientCertHeader, cert, cert}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(hr.Body)
		hr.Body.Close()
		twoHeadersRefused(t, hr.StatusCode, body, nil)
		if !strings.Contains(h.logs.String(), string(incidentRE.Find(body))) {
			t.Errorf("the incident is not logged:\n%s", h.logs.String())
		}
		if h.handler.count() != 0 {
			t.Fatal("delivered")
		}
	})
}

func twoHeadersRefused(t *testing.T, status int, body []byte, err error) {
	t.Helper()
	if status != http.StatusBadRequest || !bytes.Contains(body, []byte("more than once")) || incidentRE.Find(body) == nil {
		t.Fatalf("HTTP %d, want 400 naming the header and an incident: %v\n%s", status, err, body)
	}
}

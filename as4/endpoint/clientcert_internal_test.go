package endpoint

import (
	"encoding/base64"
	"net/url"
	"testing"
)

// FuzzForwardedCert: the forwarded client certificate header never panics.
func FuzzForwardedCert(f *testing.F) {
	f.Add(url.QueryEscape("-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n"))
	f.Add(base64.StdEncoding.EncodeToString([]byte{0x30, 0x03, 0x02, 0x01, 0x01}))
	f.Add("-----BEGIN%20CERTIFICATE")
	f.Add("%zz")
	f.Fuzz(func(t *testing.T, v string) {
		if c, err := parseForwardedCert(v); err == nil && c == nil {
			t.Fatal("nil certificate without error")
		}
	})
}

// A bdew partner's message is refused without a client certificate even if
// its partner entry somehow lists no tls_certificates (the profile requires
// mutual TLS; partners.Load refuses such a file).
func TestBDEWClientCertificateRequiredEvenWithoutList(t *testing.T) {
	if ae := checkClientCert(&trace{bdew: true}, nil); ae == nil || ae.Code != "EBMS:0101" {
		t.Fatalf("bdew without a client certificate: %v", ae)
	}
	if ae := checkClientCert(&trace{}, nil); ae != nil {
		t.Fatalf("non-bdew partner without tls_certificates: %v", ae)
	}
}

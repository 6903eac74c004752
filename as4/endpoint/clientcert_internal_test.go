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

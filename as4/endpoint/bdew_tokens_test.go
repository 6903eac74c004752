package endpoint_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/edigateway/gateway/internal/xmlenc"
	"github.com/edigateway/gateway/receipt"
)

// The BDEW AS4 profile fixes how keys are named: the signing certificate
// travels as an X509PKIPathv1 BinarySecurityToken and the recipient key is
// referenced by ds:X509SKI. Other forms, which the endpoint accepts from
// other partners, are EBMS:0103 from a bdew partner and nothing is delivered.
func TestBDEWTokenAndKeyReferenceForms(t *testing.T) {
	s := newBDEW(t)
	ctx := context.Background()
	for name, mod := range map[string]func(c *xmlenc.KeyReference, pkiPath *bool){
		"X509v3 signer token":              func(_ *xmlenc.KeyReference, p *bool) { *p = false },
		"recipient by IssuerSerial":        func(r *xmlenc.KeyReference, _ *bool) { *r = xmlenc.ByIssuerSerial },
		"recipient by KeyIdentifier SKI":   func(r *xmlenc.KeyReference, _ *bool) { *r = xmlenc.BySubjectKeyID },
		"recipient by BinarySecurityToken": func(r *xmlenc.KeyReference, _ *bool) { *r = xmlenc.ByBinarySecurityToken },
	} {
		t.Run(name, func(t *testing.T) {
			cl := *s.client
			enc := *cl.Encryption
			mod(&enc.KeyReference, &cl.PKIPath)
			cl.Encryption = &enc
			before := s.calls.Load()
			_, _, err := cl.Send(ctx, s.url, s.message(strings.ReplaceAll(name, " ", "-")+"@9900000000002"))
			var se *receipt.SignalError
			if !errors.As(err, &se) || se.Errors[0].Code != "EBMS:0103" {
				t.Fatalf("err = %v, want EBMS:0103", err)
			}
			if s.calls.Load() != before {
				t.Fatal("delivered")
			}
		})
	}
	// The profile's forms are accepted.
	if _, resp, err := s.client.Send(ctx, s.url, s.message("profile-forms@9900000000002")); err != nil || resp.Receipt == nil {
		t.Fatalf("PKIPath token and X509SKI refused: %v", err)
	}
}

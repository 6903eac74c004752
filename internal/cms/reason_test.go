package cms

import (
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"testing"
	"time"
)

// With two signer infos, one whose signature is broken and one made with a
// trusted but expired certificate, the expiry is the reason in either order.
func TestVerifyExpiryReasonDoesNotDependOnSignerInfoOrder(t *testing.T) {
	content := []byte("Content-Type: text/plain\r\n\r\nhello\r\n")
	good, goodKey := newCert(t, "valid", 0, certOpts{})
	old, oldKey := newCert(t, "expired", 1, certOpts{notBefore: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), notAfter: time.Date(2021, 1, 1, 0, 0, 0, 0, time.UTC)})
	infoOf := func(der []byte) []byte {
		sd, err := parseSignedData(der)
		if err != nil {
			t.Fatal(err)
		}
		return sd.SignerInfos[0].FullBytes
	}
	sigGood, err := SignDetached(content, good, goodKey, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	sigOld, err := SignDetached(content, old, oldKey, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	broken := append([]byte(nil), infoOf(sigGood)...)
	broken[len(broken)-3] ^= 0xff // inside the signature value
	expired := infoOf(sigOld)
	for name, order := range map[string][][]byte{"broken first": {broken, expired}, "expired first": {expired, broken}} {
		sd, _ := parseSignedData(sigGood)
		sd.SignerInfos = nil
		for _, si := range order {
			sd.SignerInfos = append(sd.SignerInfos, asn1.RawValue{FullBytes: si})
		}
		der, err := marshalContentInfo(oidSignedData, *sd)
		if err != nil {
			t.Fatal(err)
		}
		_, err = VerifyDetached(der, content, []*x509.Certificate{good, old}, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		var ve *CertificateValidityError
		if !errors.As(err, &ve) || ve.Subject != "expired" || errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: %v, want the expired certificate as the reason", name, err)
		}
	}
}

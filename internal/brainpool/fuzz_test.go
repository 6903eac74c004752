package brainpool

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// FuzzParse feeds partner bytes to the parsers: SubjectPublicKeyInfo, SEC 1
// points, certificates and ASN.1 signatures. None may panic; whatever parses
// must verify without panicking.
func FuzzParse(f *testing.F) {
	for _, v := range wycheproofECDH {
		b, _ := hex.DecodeString(v.public)
		f.Add(b)
		f.Add(b[len(b)-65:])
	}
	f.Add([]byte{0x30, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x01})
	sum := sha256.Sum256([]byte("x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if k, err := ParsePKIXPublicKey(b); err == nil {
			VerifyRaw(k, sum[:], make([]byte, 64))
		}
		if k, err := NewPublicKey(b); err == nil {
			VerifyASN1(k, sum[:], b)
		}
		ParseCertificate(b)
		ASN1ToRaw(b)
		ParsePrivateKey(b)
	})
}

package brainpool

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"

	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
)

var (
	oidECPublicKey   = asn1.ObjectIdentifier{1, 2, 840, 10045, 2, 1}
	oidBrainpoolP256 = asn1.ObjectIdentifier{1, 3, 36, 3, 3, 2, 8, 1, 1, 7}
)

type algID struct {
	Algorithm  asn1.ObjectIdentifier
	Parameters asn1.RawValue `asn1:"optional"`
}

type spki struct {
	Algorithm algID
	PublicKey asn1.BitString
}

// readSPKI reads a SubjectPublicKeyInfo in DER: SEQUENCE { SEQUENCE {
// id-ecPublicKey, namedCurve OID }, BIT STRING } and nothing else, no
// element more, no byte after (encoding/asn1 skips extra elements at the
// end of a SEQUENCE; Wycheproof ECDH cases append them). named reports
// whether the algorithm identifier, read first, names brainpoolP256r1;
// point is the BIT STRING, a whole number of bytes.
func readSPKI(der []byte) (named bool, point []byte, err error) {
	in := cryptobyte.String(der)
	var s, alg cryptobyte.String
	var algo, curve asn1.ObjectIdentifier
	if !in.ReadASN1(&s, cbasn1.SEQUENCE) || !s.ReadASN1(&alg, cbasn1.SEQUENCE) || !alg.ReadASN1ObjectIdentifier(&algo) {
		return false, nil, errors.New("brainpool: malformed SubjectPublicKeyInfo")
	}
	if !algo.Equal(oidECPublicKey) {
		return false, nil, errors.New("brainpool: not an EC public key")
	}
	if !alg.ReadASN1ObjectIdentifier(&curve) || !curve.Equal(oidBrainpoolP256) {
		return false, nil, errors.New("brainpool: EC key is not on brainpoolP256r1 (named curve OID 1.3.36.3.3.2.8.1.1.7)")
	}
	var bits asn1.BitString
	if !alg.Empty() || !s.ReadASN1BitString(&bits) || !s.Empty() || !in.Empty() || bits.BitLength%8 != 0 {
		return true, nil, errors.New("brainpool: malformed SubjectPublicKeyInfo")
	}
	return true, bits.Bytes, nil
}

// ParsePKIXPublicKey parses a SubjectPublicKeyInfo in DER holding a
// brainpoolP256r1 key: id-ecPublicKey with the named curve OID (explicit
// curve parameters are refused) and an uncompressed point on the curve.
func ParsePKIXPublicKey(der []byte) (*PublicKey, error) {
	_, point, err := readSPKI(der)
	if err != nil {
		return nil, err
	}
	return NewPublicKey(point)
}

// IsPKIXPublicKey reports whether der is a SubjectPublicKeyInfo whose
// algorithm identifier names brainpoolP256r1 (the rest may still be
// malformed: ParsePKIXPublicKey says).
func IsPKIXPublicKey(der []byte) bool {
	named, _, _ := readSPKI(der)
	return named
}

// MarshalPKIXPublicKey returns the SubjectPublicKeyInfo DER of k.
func MarshalPKIXPublicKey(k *PublicKey) ([]byte, error) {
	params, _ := asn1.Marshal(oidBrainpoolP256)
	return asn1.Marshal(spki{
		Algorithm: algID{Algorithm: oidECPublicKey, Parameters: asn1.RawValue{FullBytes: params}},
		PublicKey: asn1.BitString{Bytes: k.raw, BitLength: 8 * len(k.raw)},
	})
}

type ecPrivateKey struct {
	Version    int
	PrivateKey []byte
	Curve      asn1.ObjectIdentifier `asn1:"optional,explicit,tag:0"`
	PublicKey  asn1.BitString        `asn1:"optional,explicit,tag:1"`
}

type pkcs8 struct {
	Version    int
	Algorithm  algID
	PrivateKey []byte
}

// ParsePrivateKey parses a brainpoolP256r1 private key in PKCS #8 or SEC 1
// (RFC 5915 "EC PRIVATE KEY") DER, as openssl writes them. A public key in
// the encoding must match the scalar.
func ParsePrivateKey(der []byte) (*PrivateKey, error) {
	var p8 pkcs8
	if rest, err := asn1.Unmarshal(der, &p8); err == nil && len(rest) == 0 && p8.Algorithm.Algorithm != nil {
		if !p8.Algorithm.Algorithm.Equal(oidECPublicKey) {
			return nil, errors.New("brainpool: PKCS #8 key is not an EC key")
		}
		var curve asn1.ObjectIdentifier
		if _, err := asn1.Unmarshal(p8.Algorithm.Parameters.FullBytes, &curve); err != nil || !curve.Equal(oidBrainpoolP256) {
			return nil, errors.New("brainpool: PKCS #8 EC key is not on brainpoolP256r1")
		}
		return parseSEC1(p8.PrivateKey, true)
	}
	return parseSEC1(der, false)
}

func parseSEC1(der []byte, curveKnown bool) (*PrivateKey, error) {
	var ec ecPrivateKey
	rest, err := asn1.Unmarshal(der, &ec)
	if err != nil || len(rest) > 0 || ec.Version != 1 {
		return nil, errors.New("brainpool: malformed EC private key")
	}
	if ec.Curve != nil && !ec.Curve.Equal(oidBrainpoolP256) || ec.Curve == nil && !curveKnown {
		return nil, errors.New("brainpool: EC private key is not on brainpoolP256r1")
	}
	if len(ec.PrivateKey) > 32 {
		return nil, errors.New("brainpool: EC private key too long")
	}
	d := make([]byte, 32)
	copy(d[32-len(ec.PrivateKey):], ec.PrivateKey)
	k, err := NewPrivateKey(d)
	clear(d)
	if err != nil {
		return nil, err
	}
	if len(ec.PublicKey.Bytes) > 0 && !bytes.Equal(ec.PublicKey.RightAlign(), k.pub.raw) {
		return nil, errors.New("brainpool: EC private key does not match its public key")
	}
	return k, nil
}

// MarshalPKCS8PrivateKey returns the PKCS #8 DER of k.
func MarshalPKCS8PrivateKey(k *PrivateKey) ([]byte, error) {
	inner, err := asn1.Marshal(ecPrivateKey{Version: 1, PrivateKey: k.d[:], PublicKey: asn1.BitString{Bytes: k.pub.raw, BitLength: 8 * len(k.pub.raw)}})
	if err != nil {
		return nil, err
	}
	params, _ := asn1.Marshal(oidBrainpoolP256)
	return asn1.Marshal(pkcs8{Algorithm: algID{Algorithm: oidECPublicKey, Parameters: asn1.RawValue{FullBytes: params}}, PrivateKey: inner})
}

// ParseCertificate parses a DER certificate. Certificates with other keys
// go to x509.ParseCertificate unchanged. crypto/x509 refuses a certificate
// whose key is on a curve it does not know, so for a brainpoolP256r1 key the
// SPKI algorithm OID is masked for parsing (same length, every other field
// parsed by crypto/x509 as usual), the original bytes are put back (all Raw
// fields then hold the certificate as signed) and PublicKey is set to the
// *PublicKey, PublicKeyAlgorithm to x509.ECDSA.
func ParseCertificate(der []byte) (*x509.Certificate, error) {
	c, err := x509.ParseCertificate(der)
	if err == nil {
		return c, nil
	}
	off, spkiDER, ok := locateSPKI(der)
	if !ok || !IsPKIXPublicKey(spkiDER) {
		return nil, err
	}
	pub, perr := ParsePKIXPublicKey(spkiDER)
	if perr != nil {
		return nil, fmt.Errorf("x509: %w", perr)
	}
	// SEQUENCE { SEQUENCE { OID(7) id-ecPublicKey, ... } ... }, short lengths.
	if len(spkiDER) < 13 || spkiDER[0] != 0x30 || spkiDER[2] != 0x30 || spkiDER[4] != 0x06 || spkiDER[5] != 0x07 {
		return nil, err
	}
	buf := bytes.Clone(der)
	buf[off+12] = 0x7f // 1.2.840.10045.2.127: a key type crypto/x509 leaves unparsed
	c, err = x509.ParseCertificate(buf)
	copy(buf, der)
	if err != nil {
		return nil, err
	}
	c.PublicKeyAlgorithm = x509.ECDSA
	c.PublicKey = pub
	return c, nil
}

// locateSPKI returns the offset and bytes of the SubjectPublicKeyInfo in a certificate.
func locateSPKI(der []byte) (int, []byte, bool) {
	in := cryptobyte.String(der)
	var cert, tbs cryptobyte.String
	if !in.ReadASN1(&cert, cbasn1.SEQUENCE) || !cert.ReadASN1(&tbs, cbasn1.SEQUENCE) {
		return 0, nil, false
	}
	if !tbs.SkipOptionalASN1(cbasn1.Tag(0).Constructed().ContextSpecific()) ||
		!tbs.SkipASN1(cbasn1.INTEGER) || !tbs.SkipASN1(cbasn1.SEQUENCE) || !tbs.SkipASN1(cbasn1.SEQUENCE) ||
		!tbs.SkipASN1(cbasn1.SEQUENCE) || !tbs.SkipASN1(cbasn1.SEQUENCE) {
		return 0, nil, false
	}
	off := cap(der) - cap(tbs) // cryptobyte reads are subslices of der
	var s cryptobyte.String
	if !tbs.ReadASN1Element(&s, cbasn1.SEQUENCE) || off < 0 || off+len(s) > len(der) || !bytes.Equal(der[off:off+len(s)], s) {
		return 0, nil, false
	}
	return off, s, true
}

// CheckSignatureFrom checks that parent (with a brainpoolP256r1 key) signed
// c with ecdsa-with-SHA256.
func CheckSignatureFrom(c, parent *x509.Certificate) error {
	pub, ok := parent.PublicKey.(*PublicKey)
	if !ok {
		return errors.New("brainpool: issuer key is not brainpoolP256r1")
	}
	if c.SignatureAlgorithm != x509.ECDSAWithSHA256 {
		return fmt.Errorf("brainpool: certificate signature algorithm %v, want ECDSA-SHA256", c.SignatureAlgorithm)
	}
	sum := sha256.Sum256(c.RawTBSCertificate)
	if !VerifyASN1(pub, sum[:], c.Signature) {
		return errors.New("brainpool: certificate signature invalid")
	}
	return nil
}

// ParsePEMPrivateKey reads the first PRIVATE KEY or EC PRIVATE KEY block.
func ParsePEMPrivateKey(data []byte) (*PrivateKey, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, errors.New("brainpool: no PRIVATE KEY or EC PRIVATE KEY block")
		}
		if b.Type == "PRIVATE KEY" || b.Type == "EC PRIVATE KEY" {
			return ParsePrivateKey(b.Bytes)
		}
	}
}

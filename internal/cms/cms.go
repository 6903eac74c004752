// Package cms is the Cryptographic Message Syntax layer of the AS2 gateway:
// EnvelopedData and AuthEnvelopedData (RFC 5652, RFC 5083, RFC 5084),
// detached and attached SignedData with RSA PKCS#1 v1.5 and RSA-PSS
// (RFC 4056), and CompressedData (RFC 3274, zlib).
//
// All input is partner input: BER (indefinite lengths, chunked OCTET
// STRINGs, as mendelson and other BouncyCastle-based products send) is
// normalised to DER before parsing with encoding/asn1, nesting and sizes are
// bounded, and every failure is an error, never a panic.
//
// github.com/smallstep/pkcs7 is not used on these paths: it lacks AES-192,
// AuthEnvelopedData, RSA-PSS, CompressedData, SubjectKeyIdentifier
// recipients and verification against configured certificates only, and its
// content cipher is a package-level variable (unsafe under concurrency). The
// tests use it as an independent implementation to cross-check ours.
package cms

import (
	"bytes"
	"crypto/sha1"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"
)

// Sentinel errors. Callers branch on them with errors.Is; the returned errors
// wrap them with context.
var (
	// ErrMalformed: the input is not a well-formed CMS structure of the
	// expected type.
	ErrMalformed = errors.New("malformed CMS")
	// ErrUnsupportedAlgorithm: a digest, signature, key transport, cipher or
	// compression algorithm this package does not implement.
	ErrUnsupportedAlgorithm = errors.New("unsupported algorithm")
	// ErrNoRecipient: no RecipientInfo names one of the configured keys.
	ErrNoRecipient = errors.New("no recipient matches our keys")
	// ErrDecrypt: a recipient matched but the key or content did not decrypt
	// (wrong key, corrupt ciphertext, bad padding, failed authentication).
	ErrDecrypt = errors.New("decryption failed")
	// ErrUnknownSigner: no SignerInfo was made by one of the trusted
	// certificates.
	ErrUnknownSigner = errors.New("signer certificate not trusted")
	// ErrCertificateExpired: the trusted signer certificate is not valid at
	// the verification time.
	ErrCertificateExpired = errors.New("signer certificate not valid at verification time")
	// ErrBadSignature: the signature or the message digest does not match
	// (integrity failure).
	ErrBadSignature = errors.New("signature verification failed")
	// ErrTooLarge: decompressed content exceeds the caller's limit.
	ErrTooLarge = errors.New("content exceeds size limit")
)

// Content type names returned by ContentType.
const (
	TypeData               = "data"
	TypeSignedData         = "signed-data"
	TypeEnvelopedData      = "enveloped-data"
	TypeAuthEnvelopedData  = "auth-enveloped-data"
	TypeCompressedData     = "compressed-data"
	typeUnknownContentType = "unknown"
)

type contentInfo struct {
	ContentType asn1.ObjectIdentifier
	Content     asn1.RawValue `asn1:"explicit,tag:0"`
}

type issuerAndSerial struct {
	Issuer asn1.RawValue
	Serial asn1.RawValue
}

type attribute struct {
	Type   asn1.ObjectIdentifier
	Values asn1.RawValue `asn1:"set"`
}

// parseContentInfo normalises BER input and returns the content type and the
// DER of the content (the element inside [0] EXPLICIT).
func parseContentInfo(in []byte) (asn1.ObjectIdentifier, []byte, error) {
	if len(in) == 0 {
		return nil, nil, fmt.Errorf("%w: empty input", ErrMalformed)
	}
	der, n, err := berToDER(in)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if len(bytes.Trim(in[n:], "\x00\r\n\t ")) != 0 {
		return nil, nil, fmt.Errorf("%w: %d bytes of trailing data", ErrMalformed, len(in)-n)
	}
	var ci contentInfo
	rest, err := asn1.Unmarshal(der, &ci)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: ContentInfo: %v", ErrMalformed, err)
	}
	if len(rest) != 0 {
		return nil, nil, fmt.Errorf("%w: ContentInfo: trailing data", ErrMalformed)
	}
	return ci.ContentType, ci.Content.Bytes, nil
}

// ContentType reports the CMS content type of a ContentInfo (DER or BER):
// one of TypeSignedData, TypeEnvelopedData, TypeAuthEnvelopedData,
// TypeCompressedData, TypeData. It lets the MIME layer dispatch on the
// structure itself when smime-type is missing or wrong.
func ContentType(in []byte) (string, error) {
	oid, _, err := parseContentInfo(in)
	if err != nil {
		return "", fmt.Errorf("cms: content type: %w", err)
	}
	return contentTypeName(oid), nil
}

func contentTypeName(oid asn1.ObjectIdentifier) string {
	switch {
	case oid.Equal(oidSignedData):
		return TypeSignedData
	case oid.Equal(oidEnvelopedData):
		return TypeEnvelopedData
	case oid.Equal(oidAuthEnvelopedData):
		return TypeAuthEnvelopedData
	case oid.Equal(oidCompressedData):
		return TypeCompressedData
	case oid.Equal(oidData):
		return TypeData
	}
	return typeUnknownContentType + " " + oid.String()
}

// octets returns the value of an OCTET STRING that may be encoded primitive
// or (after berToDER, one level) constructed of primitive OCTET STRINGs, as
// happens with [0] IMPLICIT OCTET STRING fields such as encryptedContent.
func octets(v asn1.RawValue) ([]byte, error) {
	if !v.IsCompound {
		return v.Bytes, nil
	}
	var out []byte
	rest := v.Bytes
	for len(rest) > 0 {
		var seg []byte
		var err error
		rest, err = asn1.Unmarshal(rest, &seg)
		if err != nil {
			return nil, fmt.Errorf("%w: constructed OCTET STRING: %v", ErrMalformed, err)
		}
		out = append(out, seg...)
	}
	return out, nil
}

// parseSerial reads an INTEGER leniently (non-minimal encodings occur in
// real certificates).
func parseSerial(v asn1.RawValue) (*big.Int, error) {
	if v.Class != asn1.ClassUniversal || v.Tag != asn1.TagInteger || v.IsCompound || len(v.Bytes) == 0 {
		return nil, fmt.Errorf("%w: serial number is not an INTEGER", ErrMalformed)
	}
	n := new(big.Int).SetBytes(v.Bytes)
	if v.Bytes[0]&0x80 != 0 { // negative (two's complement)
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(len(v.Bytes))*8))
	}
	return n, nil
}

// matchIssuerSerial reports whether cert is the certificate named by an
// IssuerAndSerialNumber. The issuer is compared as DER bytes first and, for
// senders that re-encode names, by its parsed RDN sequence.
func matchIssuerSerial(cert *x509.Certificate, ias issuerAndSerial) bool {
	serial, err := parseSerial(ias.Serial)
	if err != nil || cert.SerialNumber == nil || serial.Cmp(cert.SerialNumber) != 0 {
		return false
	}
	if bytes.Equal(ias.Issuer.FullBytes, cert.RawIssuer) {
		return true
	}
	var a, b pkix.RDNSequence
	if rest, err := asn1.Unmarshal(ias.Issuer.FullBytes, &a); err != nil || len(rest) != 0 {
		return false
	}
	if rest, err := asn1.Unmarshal(cert.RawIssuer, &b); err != nil || len(rest) != 0 {
		return false
	}
	return a.String() == b.String()
}

// matchSKI reports whether cert has the subject key identifier ski: its
// SubjectKeyIdentifier extension or, for certificates without one (X.509
// v1), the RFC 5280 method 1 value (SHA-1 of the public key bits).
func matchSKI(cert *x509.Certificate, ski []byte) bool {
	if len(ski) == 0 {
		return false
	}
	if len(cert.SubjectKeyId) > 0 {
		return bytes.Equal(cert.SubjectKeyId, ski)
	}
	return bytes.Equal(computedSKI(cert), ski)
}

func computedSKI(cert *x509.Certificate) []byte {
	var spki struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}
	if _, err := asn1.Unmarshal(cert.RawSubjectPublicKeyInfo, &spki); err != nil {
		return nil
	}
	sum := sha1.Sum(spki.PublicKey.Bytes)
	return sum[:]
}

// identifierMatches reports whether an encoded SignerIdentifier or
// RecipientIdentifier (issuerAndSerialNumber, or [0] subjectKeyIdentifier)
// names cert.
func identifierMatches(id asn1.RawValue, cert *x509.Certificate) bool {
	switch {
	case id.Class == asn1.ClassUniversal && id.Tag == asn1.TagSequence:
		var ias issuerAndSerial
		if rest, err := asn1.Unmarshal(id.FullBytes, &ias); err != nil || len(rest) != 0 {
			return false
		}
		return matchIssuerSerial(cert, ias)
	case id.Class == asn1.ClassContextSpecific && id.Tag == 0:
		ski, err := octets(id)
		if err != nil {
			return false
		}
		return matchSKI(cert, ski)
	}
	return false
}

func marshalIssuerAndSerial(cert *x509.Certificate) (asn1.RawValue, error) {
	b, err := asn1.Marshal(struct {
		Issuer asn1.RawValue
		Serial *big.Int
	}{asn1.RawValue{FullBytes: cert.RawIssuer}, cert.SerialNumber})
	if err != nil {
		return asn1.RawValue{}, err
	}
	return asn1.RawValue{FullBytes: b}, nil
}

// Certificates returns the certificates embedded in a SignedData (DER or
// BER). They are informational only: VerifyDetached and VerifyAttached never
// trust them. Useful to show an operator which certificate a partner used.
func Certificates(in []byte) ([]*x509.Certificate, error) {
	sd, err := parseSignedData(in)
	if err != nil {
		return nil, fmt.Errorf("cms: certificates: %w", err)
	}
	return sd.certificates()
}

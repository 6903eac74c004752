package wssec

import (
	"crypto/x509"
	"encoding/asn1"
	"encoding/base64"
	"errors"
)

// maxPKIPathCerts bounds the certificates of an X509PKIPathv1 token.
const maxPKIPathCerts = 8

// pkiPath encodes a PkiPath (RFC 5755 / X.509 token profile 1.1 §3.1):
// SEQUENCE OF Certificate from the certificate closest to the trust anchor
// to the signer, which comes last.
func pkiPath(leaf *x509.Certificate, chain []*x509.Certificate) ([]byte, error) {
	if len(chain)+1 > maxPKIPathCerts {
		return nil, errors.New("PKIPath of more than 8 certificates")
	}
	var certs []asn1.RawValue
	for i := len(chain) - 1; i >= 0; i-- {
		certs = append(certs, asn1.RawValue{FullBytes: chain[i].Raw})
	}
	certs = append(certs, asn1.RawValue{FullBytes: leaf.Raw})
	return asn1.Marshal(certs)
}

// parsePKIPath returns the DER certificates of a PkiPath, signer last.
func parsePKIPath(der []byte) ([][]byte, error) {
	var certs []asn1.RawValue
	rest, err := asn1.Unmarshal(der, &certs)
	if err != nil || len(rest) != 0 {
		return nil, errors.New("X509PKIPathv1 token is not a SEQUENCE OF Certificate")
	}
	if len(certs) == 0 || len(certs) > maxPKIPathCerts {
		return nil, errors.New("X509PKIPathv1 token holds no or too many certificates")
	}
	out := make([][]byte, len(certs))
	for i, c := range certs {
		if c.Tag != asn1.TagSequence || c.Class != asn1.ClassUniversal || !c.IsCompound {
			return nil, errors.New("X509PKIPathv1 token holds a non-certificate")
		}
		out[i] = c.FullBytes
	}
	return out, nil
}

// matchPKIPath resolves an X509PKIPathv1 token: its last certificate (the
// signer) must be byte-equal to a trusted certificate. The issuers in the
// path are not trusted for anything.
func matchPKIPath(b64 string, trusted []*x509.Certificate) (*x509.Certificate, error) {
	der, err := decodeBase64(b64)
	if err != nil {
		return nil, authErrCause(err, "PKIPath token is not base64")
	}
	certs, err := parsePKIPath(der)
	if err != nil {
		return nil, authErrCause(err, "signer token is malformed")
	}
	return matchCertificate(base64.StdEncoding.EncodeToString(certs[len(certs)-1]), trusted)
}

package wssec

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/subtle"
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"

	"github.com/edigateway/gateway/internal/brainpool"

	// Register the hash functions used by the algorithm tables.
	_ "crypto/sha1"
	_ "crypto/sha256"
	_ "crypto/sha512"
)

type keyKind int

const (
	keyRSA keyKind = iota + 1
	keyECDSA
	keyEd25519
)

type signatureAlgorithm struct {
	hash crypto.Hash // 0 for Ed25519 (pure EdDSA signs the message itself)
	kind keyKind
	sha1 bool
}

var signatureAlgorithms = map[string]signatureAlgorithm{
	AlgRSASHA1:      {crypto.SHA1, keyRSA, true},
	AlgRSASHA256:    {crypto.SHA256, keyRSA, false},
	AlgRSASHA384:    {crypto.SHA384, keyRSA, false},
	AlgRSASHA512:    {crypto.SHA512, keyRSA, false},
	AlgECDSASHA256:  {crypto.SHA256, keyECDSA, false},
	AlgECDSASHA384:  {crypto.SHA384, keyECDSA, false},
	AlgECDSASHA512:  {crypto.SHA512, keyECDSA, false},
	AlgEdDSAEd25519: {0, keyEd25519, false},
}

var digestAlgorithms = map[string]crypto.Hash{
	AlgSHA1:   crypto.SHA1,
	AlgSHA256: crypto.SHA256,
	AlgSHA384: crypto.SHA384,
	AlgSHA512: crypto.SHA512,
}

func lookupSignatureAlgorithm(uri string, allowSHA1 bool) (signatureAlgorithm, error) {
	alg, ok := signatureAlgorithms[uri]
	if !ok {
		return alg, policyErr("signature method %q not supported", uri)
	}
	if alg.sha1 && !allowSHA1 {
		return alg, policyErr("signature method %q not allowed (SHA-1)", uri)
	}
	return alg, nil
}

func lookupDigest(uri string, allowSHA1 bool) (crypto.Hash, error) {
	h, ok := digestAlgorithms[uri]
	if !ok {
		return 0, policyErr("digest method %q not supported", uri)
	}
	if h == crypto.SHA1 && !allowSHA1 {
		return 0, policyErr("digest method %q not allowed (SHA-1)", uri)
	}
	return h, nil
}

func digest(h crypto.Hash, data []byte) []byte {
	d := h.New()
	d.Write(data)
	return d.Sum(nil)
}

// verifySignatureValue checks sig over signed with pub under alg.
func verifySignatureValue(alg signatureAlgorithm, pub crypto.PublicKey, signed, sig []byte, minRSABits int) error {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if alg.kind != keyRSA {
			return authErr("RSA key does not fit the signature method")
		}
		if k.N.BitLen() < minRSABits {
			return policyErr("RSA key of %d bits, at least %d required", k.N.BitLen(), minRSABits)
		}
		if err := rsa.VerifyPKCS1v15(k, alg.hash, digest(alg.hash, signed), sig); err != nil {
			return authErrCause(err, "signature value does not verify")
		}
		return nil
	case *ecdsa.PublicKey:
		if alg.kind != keyECDSA {
			return authErr("ECDSA key does not fit the signature method")
		}
		size := (k.Curve.Params().BitSize + 7) / 8
		if len(sig) != 2*size {
			return authErr("ECDSA signature value of %d bytes, expected %d (raw r||s)", len(sig), 2*size)
		}
		r := new(big.Int).SetBytes(sig[:size])
		s := new(big.Int).SetBytes(sig[size:])
		if !ecdsa.Verify(k, digest(alg.hash, signed), r, s) {
			return authErr("signature value does not verify")
		}
		return nil
	case *brainpool.PublicKey:
		if alg.kind != keyECDSA {
			return authErr("ECDSA key does not fit the signature method")
		}
		if len(sig) != 64 {
			return authErr("ECDSA signature value of %d bytes, expected 64 (raw r||s)", len(sig))
		}
		if !brainpool.VerifyRaw(k, digest(alg.hash, signed), sig) {
			return authErr("signature value does not verify")
		}
		return nil
	case ed25519.PublicKey:
		if alg.kind != keyEd25519 {
			return authErr("Ed25519 key does not fit the signature method")
		}
		if len(sig) != ed25519.SignatureSize || !ed25519.Verify(k, signed, sig) {
			return authErr("signature value does not verify")
		}
		return nil
	}
	return policyErr("unsupported public key type %T", pub)
}

// defaultSignatureMethod picks the signature method for a key.
func defaultSignatureMethod(pub crypto.PublicKey) (string, error) {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		return AlgRSASHA256, nil
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return AlgECDSASHA256, nil
		case elliptic.P384():
			return AlgECDSASHA384, nil
		case elliptic.P521():
			return AlgECDSASHA512, nil
		}
		return "", fmt.Errorf("wssec: sign: unsupported ECDSA curve %s", k.Curve.Params().Name)
	case *brainpool.PublicKey:
		return AlgECDSASHA256, nil
	case ed25519.PublicKey:
		return AlgEdDSAEd25519, nil
	}
	return "", fmt.Errorf("wssec: sign: unsupported key type %T", pub)
}

// signValue signs the canonical SignedInfo with signer under alg, returning
// the XML-DSig SignatureValue bytes (raw r||s for ECDSA).
func signValue(signer crypto.Signer, alg signatureAlgorithm, rnd interface{ Read([]byte) (int, error) }, signed []byte) ([]byte, error) {
	pub := signer.Public()
	switch pub.(type) {
	case *rsa.PublicKey:
		if alg.kind != keyRSA {
			return nil, errors.New("RSA key does not fit the signature method")
		}
	case *ecdsa.PublicKey, *brainpool.PublicKey:
		if alg.kind != keyECDSA {
			return nil, errors.New("ECDSA key does not fit the signature method")
		}
	case ed25519.PublicKey:
		if alg.kind != keyEd25519 {
			return nil, errors.New("Ed25519 key does not fit the signature method")
		}
		return signer.Sign(rnd, signed, crypto.Hash(0))
	default:
		return nil, fmt.Errorf("unsupported key type %T", pub)
	}
	sig, err := signer.Sign(rnd, digest(alg.hash, signed), alg.hash)
	if err != nil {
		return nil, err
	}
	if _, ok := pub.(*brainpool.PublicKey); ok {
		return brainpool.ASN1ToRaw(sig)
	}
	if k, ok := pub.(*ecdsa.PublicKey); ok {
		var rs struct{ R, S *big.Int }
		if rest, err := asn1.Unmarshal(sig, &rs); err != nil || len(rest) != 0 {
			return nil, fmt.Errorf("ECDSA signature is not ASN.1: %v", err)
		}
		size := (k.Curve.Params().BitSize + 7) / 8
		raw := make([]byte, 2*size)
		rs.R.FillBytes(raw[:size])
		rs.S.FillBytes(raw[size:])
		return raw, nil
	}
	return sig, nil
}

func equalBytes(a, b []byte) bool {
	return len(a) == len(b) && subtle.ConstantTimeCompare(a, b) == 1
}

package cms

import (
	"crypto"
	"encoding/asn1"
	"fmt"
	"strings"

	_ "crypto/md5"    // registers crypto.MD5 (recognised so that policy can refuse it)
	_ "crypto/sha1"   // registers crypto.SHA1
	_ "crypto/sha256" // registers crypto.SHA224, crypto.SHA256
	_ "crypto/sha512" // registers crypto.SHA384, crypto.SHA512
)

var (
	oidData              = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 1}
	oidSignedData        = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 2}
	oidEnvelopedData     = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 3}
	oidCompressedData    = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 16, 1, 9}
	oidAuthEnvelopedData = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 16, 1, 23}
	oidAttrContentType   = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 3}
	oidAttrMessageDigest = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 4}
	oidAttrSigningTime   = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 5}
	oidZlibCompress      = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 16, 3, 8}
	oidRSAEncryption     = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 1}
	oidRSAESOAEP         = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 7}
	oidMGF1              = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 8}
	oidPSpecified        = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 9}
	oidRSASSAPSS         = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 10}
	oidMD5WithRSA        = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 4}
	oidSHA1WithRSA       = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 5}
	oidSHA256WithRSA     = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 11}
	oidSHA384WithRSA     = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 12}
	oidSHA512WithRSA     = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 13}
	oidSHA224WithRSA     = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 14}
	oidDigestMD5         = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 5}
	oidDigestSHA1        = asn1.ObjectIdentifier{1, 3, 14, 3, 2, 26}
	oidDigestSHA256      = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 1}
	oidDigestSHA384      = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 2}
	oidDigestSHA512      = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 3}
	oidDigestSHA224      = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 4}
	oidCipherDESEDE3CBC  = asn1.ObjectIdentifier{1, 2, 840, 113549, 3, 7}
	oidCipherAES128CBC   = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 2}
	oidCipherAES192CBC   = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 22}
	oidCipherAES256CBC   = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 42}
	oidCipherAES128GCM   = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 6}
	oidCipherAES192GCM   = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 26}
	oidCipherAES256GCM   = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 46}
)

// Digest algorithm names used throughout the package (Signer.DigestAlg,
// SignDetached's digest argument).
const (
	DigestMD5    = "md5"
	DigestSHA1   = "sha1"
	DigestSHA224 = "sha224"
	DigestSHA256 = "sha256"
	DigestSHA384 = "sha384"
	DigestSHA512 = "sha512"
)

// Content cipher names (DecryptInfo.Cipher, Encrypt's cipher argument).
const (
	Cipher3DES      = "3des"
	CipherAES128CBC = "aes128-cbc"
	CipherAES192CBC = "aes192-cbc"
	CipherAES256CBC = "aes256-cbc"
	CipherAES128GCM = "aes128-gcm"
	CipherAES192GCM = "aes192-gcm"
	CipherAES256GCM = "aes256-gcm"
)

// Key transport names (DecryptInfo.KeyTransport).
const (
	KeyTransportRSA     = "rsa"      // RSAES-PKCS1-v1_5
	KeyTransportRSAOAEP = "rsa-oaep" // RSAES-OAEP
)

// digestAlg is a digest algorithm of SignedData and of the AS2 MIC. SHA-1
// is listed deliberately: RFC 4130 AS2 partners sign and ask for MICs with
// sha1, and refusing to parse it would refuse them outright (MD5 is
// recognised only so that it can be refused by name). Whether a partner
// may use one is its as2.allowed_digests policy (package partners), not
// this table.
type digestAlg struct {
	name string
	hash crypto.Hash
	oid  asn1.ObjectIdentifier
}

var digestAlgs = []digestAlg{
	{DigestMD5, crypto.MD5, oidDigestMD5},
	{DigestSHA1, crypto.SHA1, oidDigestSHA1},
	{DigestSHA224, crypto.SHA224, oidDigestSHA224},
	{DigestSHA256, crypto.SHA256, oidDigestSHA256},
	{DigestSHA384, crypto.SHA384, oidDigestSHA384},
	{DigestSHA512, crypto.SHA512, oidDigestSHA512},
}

// NormalizeDigest maps the digest spellings found in AS2 headers and S/MIME
// micalg parameters ("sha256", "sha-256", "SHA256", "rsa-sha256", "md5") to
// this package's name ("sha256"). It reports ErrUnsupportedAlgorithm for
// anything else.
func NormalizeDigest(name string) (string, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	n = strings.TrimPrefix(n, "rsa-")
	n = strings.ReplaceAll(n, "-", "")
	n = strings.ReplaceAll(n, "_", "")
	for _, d := range digestAlgs {
		if d.name == n {
			return d.name, nil
		}
	}
	return "", fmt.Errorf("cms: digest %q: %w", name, ErrUnsupportedAlgorithm)
}

// DigestHash returns the crypto.Hash of a digest name in any spelling that
// NormalizeDigest accepts.
func DigestHash(name string) (crypto.Hash, error) {
	n, err := NormalizeDigest(name)
	if err != nil {
		return 0, err
	}
	d, _ := digestByName(n)
	return d.hash, nil
}

func digestByName(name string) (digestAlg, bool) {
	for _, d := range digestAlgs {
		if d.name == name {
			return d, true
		}
	}
	return digestAlg{}, false
}

func digestByOID(oid asn1.ObjectIdentifier) (digestAlg, bool) {
	for _, d := range digestAlgs {
		if d.oid.Equal(oid) {
			return d, true
		}
	}
	return digestAlg{}, false
}

// contentCipher is a content-encryption algorithm of EnvelopedData or
// AuthEnvelopedData. 3DES (des-ede3-cbc) is among them deliberately: RFC
// 5751 made it the cipher every S/MIME agent must decrypt and many AS2
// partners still send it; whether a partner may use it is its
// as2.allowed_ciphers policy (package partners), not this table.
type contentCipher struct {
	name    string
	oid     asn1.ObjectIdentifier
	keyLen  int
	aead    bool // AES-GCM
	tripDES bool
}

var contentCiphers = []contentCipher{
	{Cipher3DES, oidCipherDESEDE3CBC, 24, false, true},
	{CipherAES128CBC, oidCipherAES128CBC, 16, false, false},
	{CipherAES192CBC, oidCipherAES192CBC, 24, false, false},
	{CipherAES256CBC, oidCipherAES256CBC, 32, false, false},
	{CipherAES128GCM, oidCipherAES128GCM, 16, true, false},
	{CipherAES192GCM, oidCipherAES192GCM, 24, true, false},
	{CipherAES256GCM, oidCipherAES256GCM, 32, true, false},
}

func cipherByOID(oid asn1.ObjectIdentifier) (contentCipher, bool) {
	for _, c := range contentCiphers {
		if c.oid.Equal(oid) {
			return c, true
		}
	}
	return contentCipher{}, false
}

// NormalizeCipher maps cipher spellings ("3des", "des-ede3-cbc", "tripledes",
// "aes128", "aes-128-cbc", "aes128_gcm", "aes-256-gcm", ...) to this package's
// name ("aes128-cbc"). A bare "aesNNN" means CBC.
func NormalizeCipher(name string) (string, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	n = strings.NewReplacer("-", "", "_", "", " ", "").Replace(n)
	switch n {
	case "3des", "des3", "desede3", "desede3cbc", "tripledes", "des3cbc", "3descbc":
		return Cipher3DES, nil
	}
	for _, size := range []string{"128", "192", "256"} {
		switch n {
		case "aes" + size, "aes" + size + "cbc":
			return "aes" + size + "-cbc", nil
		case "aes" + size + "gcm":
			return "aes" + size + "-gcm", nil
		}
	}
	return "", fmt.Errorf("cms: cipher %q: %w", name, ErrUnsupportedAlgorithm)
}

func cipherByName(name string) (contentCipher, error) {
	n, err := NormalizeCipher(name)
	if err != nil {
		return contentCipher{}, err
	}
	for _, c := range contentCiphers {
		if c.name == n {
			return c, nil
		}
	}
	return contentCipher{}, fmt.Errorf("cms: cipher %q: %w", name, ErrUnsupportedAlgorithm)
}

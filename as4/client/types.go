package client

import "github.com/edigateway/gateway/internal/xmlenc"

// KeyReference selects how the EncryptedKey names the recipient certificate
// (Encryption.KeyReference).
type KeyReference = xmlenc.KeyReference

// The ways an EncryptedKey names the recipient certificate.
const (
	// ByIssuerSerial writes ds:X509Data/ds:X509IssuerSerial (the default).
	ByIssuerSerial = xmlenc.ByIssuerSerial
	// BySubjectKeyID writes a wsse:KeyIdentifier of ValueType
	// X509SubjectKeyIdentifier.
	BySubjectKeyID = xmlenc.BySubjectKeyID
	// ByThumbprint writes a wsse:KeyIdentifier of ValueType ThumbprintSHA1.
	ByThumbprint = xmlenc.ByThumbprint
	// ByBinarySecurityToken adds the certificate as a
	// wsse:BinarySecurityToken and references it with wsse:Reference.
	ByBinarySecurityToken = xmlenc.ByBinarySecurityToken
	// ByX509SKI writes ds:X509Data/ds:X509SKI (the BDEW AS4 profile's
	// RecipientKeyInfo).
	ByX509SKI = xmlenc.ByX509SKI
)

// EncryptOptions selects the encryption algorithms by their URIs
// (Encryption.Options); the zero value gives rsa-oaep-mgf1p with SHA-256
// (RSA recipients) or X25519 + HKDF + kw-aes128 (X25519 recipients), and
// AES-128-GCM.
type EncryptOptions = xmlenc.EncryptOptions

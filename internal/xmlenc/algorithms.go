package xmlenc

import (
	"crypto"
	_ "crypto/sha1" // registers crypto.SHA1 for OAEP and MGF1
	_ "crypto/sha256"
	_ "crypto/sha512"
)

// XML namespaces used by XML Encryption inside WS-Security headers.
const (
	NSXEnc     = "http://www.w3.org/2001/04/xmlenc#"
	NSXEnc11   = "http://www.w3.org/2009/xmlenc11#"
	NSDSig     = "http://www.w3.org/2000/09/xmldsig#"
	NSDSig11   = "http://www.w3.org/2009/xmldsig11#"
	NSDSigMore = "http://www.w3.org/2021/04/xmldsig-more#"
	NSWSSE     = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd"
	NSWSSE11   = "http://docs.oasis-open.org/wss/oasis-wss-wssecurity-secext-1.1.xsd"
	NSWSU      = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd"
	NSSOAP11   = "http://schemas.xmlsoap.org/soap/envelope/"
	NSSOAP12   = "http://www.w3.org/2003/05/soap-envelope"
)

// Key transport algorithms (RSA-OAEP) and their parameters.
const (
	// AlgRSAOAEPMGF1P is RSA-OAEP whose MGF is always MGF1 with SHA-1; the OAEP
	// digest comes from ds:DigestMethod (default SHA-1).
	AlgRSAOAEPMGF1P = "http://www.w3.org/2001/04/xmlenc#rsa-oaep-mgf1p"
	// AlgRSAOAEP is XML Encryption 1.1 RSA-OAEP with explicit ds:DigestMethod and xenc11:MGF
	// (both default to SHA-1).
	AlgRSAOAEP = "http://www.w3.org/2009/xmlenc11#rsa-oaep"

	AlgMGF1SHA1   = "http://www.w3.org/2009/xmlenc11#mgf1sha1"
	AlgMGF1SHA224 = "http://www.w3.org/2009/xmlenc11#mgf1sha224"
	AlgMGF1SHA256 = "http://www.w3.org/2009/xmlenc11#mgf1sha256"
	AlgMGF1SHA384 = "http://www.w3.org/2009/xmlenc11#mgf1sha384"
	AlgMGF1SHA512 = "http://www.w3.org/2009/xmlenc11#mgf1sha512"

	AlgSHA1   = "http://www.w3.org/2000/09/xmldsig#sha1"
	AlgSHA224 = "http://www.w3.org/2001/04/xmldsig-more#sha224"
	AlgSHA256 = "http://www.w3.org/2001/04/xmlenc#sha256"
	AlgSHA384 = "http://www.w3.org/2001/04/xmldsig-more#sha384"
	AlgSHA512 = "http://www.w3.org/2001/04/xmlenc#sha512"
)

// Key agreement (eDelivery AS4 2.0), key derivation and AES key wrap.
const (
	AlgX25519     = "http://www.w3.org/2021/04/xmldsig-more#x25519"
	AlgHKDF       = "http://www.w3.org/2021/04/xmldsig-more#hkdf"
	AlgHMACSHA256 = "http://www.w3.org/2001/04/xmldsig-more#hmac-sha256"
	AlgHMACSHA384 = "http://www.w3.org/2001/04/xmldsig-more#hmac-sha384"
	AlgHMACSHA512 = "http://www.w3.org/2001/04/xmldsig-more#hmac-sha512"

	// AlgECDHES is XML Encryption 1.1 ephemeral-static ECDH (BDEW AS4: on
	// brainpoolP256r1), with AlgConcatKDF (NIST SP 800-56A) as key derivation.
	AlgECDHES    = "http://www.w3.org/2009/xmlenc11#ECDH-ES"
	AlgConcatKDF = "http://www.w3.org/2009/xmlenc11#ConcatKDF"

	AlgKWAES128 = "http://www.w3.org/2001/04/xmlenc#kw-aes128"
	AlgKWAES192 = "http://www.w3.org/2001/04/xmlenc#kw-aes192"
	AlgKWAES256 = "http://www.w3.org/2001/04/xmlenc#kw-aes256"
)

// Content (data) encryption algorithms.
const (
	AlgAES128GCM = "http://www.w3.org/2009/xmlenc11#aes128-gcm"
	AlgAES192GCM = "http://www.w3.org/2009/xmlenc11#aes192-gcm"
	AlgAES256GCM = "http://www.w3.org/2009/xmlenc11#aes256-gcm"
	AlgAES128CBC = "http://www.w3.org/2001/04/xmlenc#aes128-cbc"
	AlgAES192CBC = "http://www.w3.org/2001/04/xmlenc#aes192-cbc"
	AlgAES256CBC = "http://www.w3.org/2001/04/xmlenc#aes256-cbc"
)

// EncryptedData Type values.
const (
	TypeElement                   = "http://www.w3.org/2001/04/xmlenc#Element"
	TypeContent                   = "http://www.w3.org/2001/04/xmlenc#Content"
	TypeAttachmentContentOnly     = "http://docs.oasis-open.org/wss/oasis-wss-SwAProfile-1.1#Attachment-Content-Only"
	TypeAttachmentComplete        = "http://docs.oasis-open.org/wss/oasis-wss-SwAProfile-1.1#Attachment-Complete"
	TransformAttachmentCiphertext = "http://docs.oasis-open.org/wss/oasis-wss-SwAProfile-1.1#Attachment-Ciphertext-Transform"
)

// WS-Security token profile identifiers.
const (
	valueTypeX509v3     = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-x509-token-profile-1.0#X509v3"
	valueTypeSKI        = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-x509-token-profile-1.0#X509SubjectKeyIdentifier"
	valueTypeThumbprint = "http://docs.oasis-open.org/wss/oasis-wss-soap-message-security-1.1#ThumbprintSHA1"
	encodingBase64      = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary"
	tokenTypeEncKey     = "http://docs.oasis-open.org/wss/oasis-wss-soap-message-security-1.1#EncryptedKey"
	retrievalEncKey     = "http://www.w3.org/2001/04/xmlenc#EncryptedKey"
)

var digestAlgs = map[string]crypto.Hash{
	AlgSHA1:   crypto.SHA1,
	AlgSHA224: crypto.SHA224,
	AlgSHA256: crypto.SHA256,
	AlgSHA384: crypto.SHA384,
	AlgSHA512: crypto.SHA512,
}

var mgfAlgs = map[string]crypto.Hash{
	AlgMGF1SHA1:   crypto.SHA1,
	AlgMGF1SHA224: crypto.SHA224,
	AlgMGF1SHA256: crypto.SHA256,
	AlgMGF1SHA384: crypto.SHA384,
	AlgMGF1SHA512: crypto.SHA512,
}

var prfAlgs = map[string]crypto.Hash{
	AlgHMACSHA256: crypto.SHA256,
	AlgHMACSHA384: crypto.SHA384,
	AlgHMACSHA512: crypto.SHA512,
}

// keyWrapSizes gives the KEK length in bytes for each AES key wrap algorithm.
var keyWrapSizes = map[string]int{
	AlgKWAES128: 16,
	AlgKWAES192: 24,
	AlgKWAES256: 32,
}

type dataCipher struct {
	keyLen int
	gcm    bool
}

var dataAlgs = map[string]dataCipher{
	AlgAES128GCM: {16, true},
	AlgAES192GCM: {24, true},
	AlgAES256GCM: {32, true},
	AlgAES128CBC: {16, false},
	AlgAES192CBC: {24, false},
	AlgAES256CBC: {32, false},
}

package endpoint

import (
	"crypto"
	"crypto/x509"
	"fmt"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/internal/brainpool"
	"github.com/edigateway/gateway/internal/wssec"
	"github.com/edigateway/gateway/internal/xmlenc"
)

// BDEWEncryptionAlgorithms are the only encryption algorithms a message of a
// bdew partner may use: ECDH-ES on brainpoolP256r1, ConcatKDF with SHA-256,
// AES-128 key wrap, AES-128-GCM. They replace Config.AllowedAlgorithms for
// such partners.
var BDEWEncryptionAlgorithms = []string{xmlenc.AlgECDHES, xmlenc.AlgConcatKDF, xmlenc.AlgSHA256, xmlenc.AlgKWAES128, xmlenc.AlgAES128GCM}

// signingKey is the key that signs our signals to one partner.
type signingKey struct {
	signer  crypto.Signer
	cert    *x509.Certificate
	pkiPath bool
}

// bdewSigningKey picks the first brainpoolP256r1 key among keys whose
// certificate allows digital signatures (the profile gives signing and
// encryption separate key pairs), or nil.
func bdewSigningKey(keys []xmlenc.KeyPair) *signingKey {
	for _, k := range keys {
		bk, ok := k.Key.(*brainpool.PrivateKey)
		if !ok || k.Cert == nil || !bk.PublicKey().Equal(k.Cert.PublicKey) {
			continue
		}
		if !maySign(k.Cert) {
			continue
		}
		return &signingKey{signer: bk, cert: k.Cert, pkiPath: true}
	}
	return nil
}

// signingKeyFor returns the key of identity id (nil: the first) for
// signals to a partner: for bdew partners its brainpool signing key (an
// X509PKIPathv1 token), else its signing key (see newIdentity).
func (e *Endpoint) signingKeyFor(id *ownIdentity, bdew bool) (signingKey, error) {
	if id == nil {
		id = e.ids[0]
	}
	if !bdew {
		return signingKey{signer: id.signer, cert: id.signerCert}, nil
	}
	if id.bdewKey == nil {
		return signingKey{}, fmt.Errorf("as4 endpoint: a bdew partner needs a brainpoolP256r1 signing key among the keys of our party %s", id.PartyID)
	}
	return *id.bdewKey, nil
}

// checkBDEWSignature enforces the profile's signature algorithms: ECDSA-SHA256
// with a brainpoolP256r1 key from an X509PKIPathv1 token, SHA-256 digests.
func checkBDEWSignature(res *wssec.Result) *as4.Error {
	if res.SignatureMethod != wssec.AlgECDSASHA256 {
		return as4.PolicyNoncompliance("the BDEW AS4 profile requires ecdsa-sha256 signatures; this message uses "+truncate(res.SignatureMethod), nil)
	}
	if res.TokenType != wssec.ValueTypeX509PKIPathv1 {
		return as4.PolicyNoncompliance("the BDEW AS4 profile requires the signing certificate as an X509PKIPathv1 BinarySecurityToken", nil)
	}
	if _, ok := res.Signer.PublicKey.(*brainpool.PublicKey); !ok {
		return as4.PolicyNoncompliance("the BDEW AS4 profile requires a brainpoolP256r1 signing key", nil)
	}
	for _, r := range res.References {
		if r.DigestMethod != wssec.AlgSHA256 {
			return as4.PolicyNoncompliance("the BDEW AS4 profile requires SHA-256 digests; reference "+truncate(r.URI)+" uses "+truncate(r.DigestMethod), nil)
		}
	}
	return nil
}

// checkBDEWKeyReference enforces the profile's recipient key reference: every
// key the message was encrypted with named our certificate by ds:X509SKI.
func checkBDEWKeyReference(keys []xmlenc.UsedKey) *as4.Error {
	for _, k := range keys {
		if k.Reference != xmlenc.RefX509SKI {
			return as4.PolicyNoncompliance("the BDEW AS4 profile requires the recipient key referenced by X509SKI; this message uses "+truncate(k.Reference), nil)
		}
	}
	return nil
}

// checkBDEWCompression enforces the profile's P-Mode
// (PayloadService.CompressionType application/gzip): every payload is
// gzip-compressed. EBMS:0010 ProcessingModeMismatch: the message does not
// follow the P-Mode agreed for it (ebMS 3 Core §6.7.1); EBMS:0303
// DecompressionFailure would claim a payload that could not be
// decompressed, and nothing here was.
func checkBDEWCompression(payloads []as4.Payload) *as4.Error {
	for i, p := range payloads {
		if ct := p.PartInfo.PropertyMap()[as4.PropCompressionType]; ct != as4.CompressionGzip {
			what := "no CompressionType"
			if ct != "" {
				what = fmt.Sprintf("CompressionType %q", truncate(ct))
			}
			return as4.ProcessingModeMismatch(fmt.Sprintf("the BDEW AS4 P-Mode requires every payload compressed with %s; payload %s has %s",
				as4.CompressionGzip, payloadName(p.PartInfo.Href, i), what), nil)
		}
	}
	return nil
}

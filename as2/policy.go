package as2

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/smime"
	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/mdn"
	"github.com/edigateway/gateway/partners"
)

// defaultDigests are the digests allowed when a partner lists none: all
// supported ones except MD5.
var defaultDigests = []string{cms.DigestSHA1, cms.DigestSHA224, cms.DigestSHA256, cms.DigestSHA384, cms.DigestSHA512}

// digestAllowed applies the partner's allowed_digests to a cms digest name.
func digestAllowed(a *partners.AS2, digest string) bool {
	if len(a.AllowedDigests) == 0 {
		return slices.Contains(defaultDigests, digest)
	}
	return slices.Contains(a.AllowedDigests, digest)
}

// cipherAllowed applies the partner's allowed_ciphers to a cms cipher name.
func cipherAllowed(a *partners.AS2, cipher string) bool {
	return len(a.AllowedCiphers) == 0 || slices.Contains(a.AllowedCiphers, cipher)
}

// policyViolation checks an unwrapped message against the partner
// agreement and says why it is refused ("" when it is acceptable).
func policyViolation(a *partners.AS2, res *smime.Result) string {
	switch {
	case a.RequireSignature && !res.Signed:
		return "the trading partner agreement requires signed messages and this message is not signed"
	case a.RequireEncryption && !res.Encrypted:
		return "the trading partner agreement requires encrypted messages and this message is not encrypted"
	case res.Signed && res.Signer != nil && !digestAllowed(a, res.Signer.DigestAlg):
		return fmt.Sprintf("the signature digest %s is not allowed by the trading partner agreement", res.Signer.DigestAlg)
	case res.Encrypted && !cipherAllowed(a, res.Decryption.Cipher):
		return fmt.Sprintf("the content cipher %s is not allowed by the trading partner agreement", res.Decryption.Cipher)
	}
	return ""
}

// classify maps an Unwrap error to the disposition RFC 4130 §7.5.3 names
// for it and a sentence for the MDN's human text.
func classify(res *smime.Result, err error, from string) (mdn.Disposition, string) {
	var te *trust.Error
	if errors.As(err, &te) {
		return mdn.DispAuthenticationFailed, te.Reason
	}
	switch {
	case errors.Is(err, cms.ErrNoRecipient):
		return mdn.DispDecryptionFailed, "the message is not encrypted for any of our certificates"
	case errors.Is(err, cms.ErrDecrypt):
		return mdn.DispDecryptionFailed, "the message could not be decrypted"
	case errors.Is(err, cms.ErrUnknownSigner):
		return mdn.DispAuthenticationFailed, fmt.Sprintf("the signature was not made with a certificate configured for AS2-From %q", from)
	case errors.Is(err, cms.ErrCertificateExpired):
		var ve *cms.CertificateValidityError
		if errors.As(err, &ve) && ve.Cert != nil {
			// The wording AS4's EBMS:0101 uses too (package trust).
			if terr := trust.CheckValidity(ve.Cert, ve.At); terr != nil {
				return mdn.DispAuthenticationFailed, "the signer's " + terr.Error()
			}
		}
		if errors.As(err, &ve) {
			return mdn.DispAuthenticationFailed, fmt.Sprintf("the signer's certificate %q (serial %s) is valid from %s to %s, not at %s",
				ve.Subject, ve.Serial, ve.NotBefore.UTC().Format(time.RFC3339), ve.NotAfter.UTC().Format(time.RFC3339), ve.At.UTC().Format(time.RFC3339))
		}
		return mdn.DispAuthenticationFailed, "the signer's certificate is not valid at this time"
	case errors.Is(err, cms.ErrBadSignature):
		return mdn.DispIntegrityCheckFailed, "the signature does not match the content (integrity check failed)"
	}
	layer := ""
	if res != nil && len(res.Layers) > 0 {
		layer = res.Layers[len(res.Layers)-1]
	}
	if errors.Is(err, smime.ErrMalformedMIME) && layer != smime.LayerSigned {
		return mdn.DispUnexpectedProcessingError, "the MIME structure of the message is malformed"
	}
	switch layer {
	case smime.LayerEncrypted:
		return mdn.DispDecryptionFailed, "the encrypted content is malformed or uses an unsupported algorithm"
	case smime.LayerCompressed:
		return mdn.DispDecompressionFailed, "the compressed content could not be decompressed"
	case smime.LayerSigned, smime.LayerSignedOpaque:
		return mdn.DispIntegrityCheckFailed, "the signature is malformed or uses an unsupported algorithm"
	}
	return mdn.DispUnexpectedProcessingError, "the message could not be read"
}

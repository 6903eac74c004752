package smime

import (
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/edigateway/gateway/internal/cms"
)

// MIC returns the base64 message integrity check of the message for the
// Received-Content-MIC of an MDN (RFC 4130 §7.3.1, RFC 5402 §4), computed
// with alg in any spelling NormalizeMICAlg accepts. The input is:
//   - signed messages: exactly the bytes the signature verified (the first
//     part of multipart/signed as sent, headers and body, or the content of
//     opaque signed-data) of the outermost signature; with the signature's
//     own digest this equals its messageDigest;
//   - encrypted, unsigned messages: the decrypted (and decompressed) MIME
//     entity with its headers, or the bare payload;
//   - compressed, unsigned, unencrypted messages: the decompressed MIME
//     entity with all its headers (RFC 5402 §4), or the content only with
//     Options.ContentOnlyCompressedMIC;
//   - plain messages: the content without MIME headers.
func (r *Result) MIC(alg string) (string, error) {
	h, err := cms.DigestHash(alg)
	if err != nil {
		return "", fmt.Errorf("smime: mic: %w", err)
	}
	d := h.New()
	d.Write(r.micInput)
	return base64.StdEncoding.EncodeToString(d.Sum(nil)), nil
}

// ReceivedContentMIC returns the value of an MDN's Received-Content-MIC
// field: the MIC, a comma and the algorithm spelled as the partner asked for
// it (trimmed, e.g. "sha-256" or "sha256").
func (r *Result) ReceivedContentMIC(alg string) (string, error) {
	mic, err := r.MIC(alg)
	if err != nil {
		return "", err
	}
	return mic + ", " + strings.TrimSpace(alg), nil
}

// MICInput returns the bytes the MIC is computed over (see MIC).
func (r *Result) MICInput() []byte { return r.micInput }

// micalgNames maps cms digest names to the RFC 5751 micalg spelling.
var micalgNames = map[string]string{
	cms.DigestMD5:    "md5",
	cms.DigestSHA1:   "sha-1",
	cms.DigestSHA224: "sha-224",
	cms.DigestSHA256: "sha-256",
	cms.DigestSHA384: "sha-384",
	cms.DigestSHA512: "sha-512",
}

// NormalizeMICAlg maps any accepted spelling of a MIC algorithm ("sha1",
// "SHA-1", "sha256", "sha-256", "sha384", "sha-384", "sha512", "sha-512",
// "md5", ...) to the RFC 5751 micalg spelling ("sha-256").
func NormalizeMICAlg(alg string) (string, error) {
	n, err := cms.NormalizeDigest(alg)
	if err != nil {
		return "", fmt.Errorf("smime: %w", err)
	}
	return micalgNames[n], nil
}

package smime

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/edigateway/gateway/internal/cms"
)

// Compression selects whether and where Build compresses (RFC 5402).
type Compression int

const (
	// NoCompression sends the payload uncompressed.
	NoCompression Compression = iota
	// CompressThenSign compresses the payload entity and signs the
	// compressed entity (the MIC covers the compressed entity).
	CompressThenSign
	// SignThenCompress compresses the multipart/signed entity.
	SignThenCompress
)

// BuildOptions selects the protection Build applies. Signing is on when
// SignDigest is set, encryption when Cipher is set.
type BuildOptions struct {
	// SignCert and SignKey sign with SignDigest ("sha1", "sha256",
	// "sha-512", ...); SignPSS selects RSASSA-PSS.
	SignCert   *x509.Certificate
	SignKey    crypto.Signer
	SignDigest string
	SignPSS    bool
	// SignChain are intermediates embedded in the signature after SignCert.
	SignChain []*x509.Certificate
	// EncryptCerts are the partner's encryption certificates; Cipher is a
	// cms cipher name ("3des", "aes128-cbc", "aes256-cbc", "aes128-gcm",
	// ...); OAEP selects RSAES-OAEP key transport.
	EncryptCerts []*x509.Certificate
	Cipher       string
	OAEP         bool
	// Compression: NoCompression, CompressThenSign or SignThenCompress
	// (without signing both just compress).
	Compression Compression
	// TransferEncoding of the payload part: "binary" (default) or "base64".
	TransferEncoding string
	// MICAlg is the MIC algorithm of an unsigned message (default
	// "sha-256"); a signed message's MIC uses SignDigest.
	MICAlg string
}

// Built is an outbound AS2 message.
type Built struct {
	// Header holds the outermost entity's header fields, which become the
	// HTTP request's Content-Type (and, for an unprotected message,
	// Content-Transfer-Encoding and Content-Disposition).
	Header Header
	// ContentType is Header's Content-Type value.
	ContentType string
	// Body is the HTTP request body.
	Body []byte
	// MIC is the base64 MIC the partner's MDN must return, computed over
	// the same bytes Unwrap uses on the receiving side; MICAlg names its
	// algorithm (RFC 5751 spelling, e.g. "sha-256").
	MIC    string
	MICAlg string
}

// entity is an entity being built: header fields and body.
type entity struct {
	header Header
	body   []byte
}

func (e entity) bytes() []byte {
	var b bytes.Buffer
	for _, f := range e.header {
		b.WriteString(f.Name)
		b.WriteString(": ")
		b.WriteString(f.Value)
		b.WriteString("\r\n")
	}
	b.WriteString("\r\n")
	b.Write(e.body)
	return b.Bytes()
}

// Build makes an AS2 message from a payload in the standard order: payload
// entity, compression (CompressThenSign), multipart/signed, compression
// (SignThenCompress), enveloped-data. Every header line ends in CRLF and the
// payload is sent with Content-Transfer-Encoding binary (or base64), so
// Unwrap of the result yields payload and MIC unchanged.
func Build(payload []byte, contentType, filename string, opts BuildOptions) (*Built, error) {
	plan, err := planBuild(contentType, filename, opts)
	if err != nil {
		return nil, err
	}
	cur := entity{header: plan.payloadHeader, body: payload}
	if plan.base64 {
		cur.body = base64Lines(payload)
	}
	micInput := payload // plain: content without headers
	if (plan.encrypting || plan.compressBefore) && !plan.signing {
		// Encrypted or compressed, unsigned: the uncompressed entity with
		// its MIME headers (RFC 4130 §7.3.1, RFC 5402 §4).
		micInput = cur.bytes()
	}
	if plan.compressBefore {
		if cur, err = compressedEntity(cur); err != nil {
			return nil, err
		}
	}
	if plan.signing {
		signed := cur.bytes()
		if cur, err = signedEntity(signed, plan.micName, opts); err != nil {
			return nil, err
		}
		micInput = signed
	}
	if plan.compressAfter {
		if cur, err = compressedEntity(cur); err != nil {
			return nil, err
		}
	}
	if plan.encrypting {
		der, err := cms.Encrypt(cur.bytes(), opts.EncryptCerts, opts.Cipher, opts.OAEP)
		if err != nil {
			return nil, fmt.Errorf("smime: build: %w", err)
		}
		cur = entity{header: envelopedHeader(), body: der}
	}

	h, _ := cms.DigestHash(plan.micName)
	d := h.New()
	d.Write(micInput)
	return &Built{
		Header:      cur.header,
		ContentType: cur.header.Get("Content-Type"),
		Body:        cur.body,
		MIC:         base64.StdEncoding.EncodeToString(d.Sum(nil)),
		MICAlg:      plan.micName,
	}, nil
}

func compressedEntity(e entity) (entity, error) {
	der, err := cms.Compress(e.bytes())
	if err != nil {
		return entity{}, fmt.Errorf("smime: build: %w", err)
	}
	return entity{header: compressedHeader(), body: der}, nil
}

func signedEntity(signed []byte, micalg string, opts BuildOptions) (entity, error) {
	if opts.SignCert == nil || opts.SignKey == nil {
		return entity{}, errors.New("smime: build: signing needs SignCert and SignKey")
	}
	sig, err := cms.Sign(signed, opts.SignCert, opts.SignKey, cms.SignOptions{Digest: opts.SignDigest, PSS: opts.SignPSS, Chain: opts.SignChain})
	if err != nil {
		return entity{}, fmt.Errorf("smime: build: %w", err)
	}
	boundary, err := newBoundary(signed)
	if err != nil {
		return entity{}, err
	}
	var b bytes.Buffer
	b.WriteString("--" + boundary + "\r\n")
	b.Write(signed)
	b.Write(signaturePart(boundary, sig))
	return entity{header: signedHeader(micalg, boundary), body: b.Bytes()}, nil
}

// newBoundary returns a random boundary that does not occur in content.
func newBoundary(content []byte) (string, error) {
	for range 8 {
		b, err := randomBoundary()
		if err != nil {
			return "", err
		}
		if !bytes.Contains(content, []byte(b)) {
			return b, nil
		}
	}
	return "", errors.New("smime: build: no boundary found that is absent from the content")
}

// base64Lines encodes b as base64 in CRLF-terminated lines of 76 characters
// (the last line has no line break).
func base64Lines(b []byte) []byte {
	enc := base64.StdEncoding.EncodeToString(b)
	var out bytes.Buffer
	for len(enc) > 76 {
		out.WriteString(enc[:76])
		out.WriteString("\r\n")
		enc = enc[76:]
	}
	out.WriteString(enc)
	return out.Bytes()
}

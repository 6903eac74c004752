package smime

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/limits"
)

// Layer names reported in Result.Layers, outermost first.
const (
	LayerEncrypted    = "encrypted"     // EnvelopedData / AuthEnvelopedData
	LayerSigned       = "signed"        // multipart/signed
	LayerSignedOpaque = "signed-opaque" // application/pkcs7-mime; smime-type=signed-data
	LayerCompressed   = "compressed"    // CompressedData
)

// DefaultContentType is the content type given to a bare payload (decrypted
// or decompressed content without a MIME header block, quirk 3).
const DefaultContentType = "application/edi-consent"

// Defaults for Options.
const (
	DefaultMaxLayers = 8
	DefaultMaxSize   = limits.DefaultMaxDecompressedBytes
)

// Options configures Unwrap.
type Options struct {
	// Keys are our decryption key pairs (several during rollover).
	Keys []cms.KeyPair
	// Trusted are the partner's signing certificates (several during
	// rollover). A certificate embedded in a signature counts only if it is
	// one of these.
	Trusted []*x509.Certificate
	// CheckSigner, when set, turns on CA trust: a certificate embedded in
	// the signature may verify it too, and the signer is then accepted only
	// if CheckSigner accepts it (see cms.VerifyDetachedCheck).
	CheckSigner cms.SignerCheck
	// Now is the clock for certificate validity; nil means time.Now. A
	// clock returning the zero time disables the validity check.
	Now func() time.Time
	// MaxLayers bounds the number of S/MIME layers (default 8).
	MaxLayers int
	// MaxSize bounds the decompressed size of each compressed layer and of
	// all of them together (default 256 MiB).
	MaxSize int64
	// MaxRatio bounds decompressed ÷ compressed bytes of each compressed
	// layer, and of all of them against the outermost one's compressed
	// size, once the output is past 1 MiB (default
	// limits.DefaultMaxCompressionRatio; negative: no ratio cap).
	MaxRatio float64
	// MaxCompressedLayers bounds the nested compressed layers (default
	// limits.DefaultMaxCompressedLayers).
	MaxCompressedLayers int
	// SpoolDir holds large decompressed output while it is inflated ("" =
	// system temporary directory).
	SpoolDir string
	// Reserve, when set, is called with the number of bytes decompression
	// is about to hold in memory (the request's memory budget); its error
	// stops the unwrap and is returned wrapped.
	Reserve func(n int64) error
	// DefaultContentType is used for a bare payload; empty means
	// DefaultContentType ("application/edi-consent").
	DefaultContentType string
	// StrictLineEndings disables the fallback that retries a failed
	// signature over the signed part with its header lines, then all its
	// lines, converted to CRLF (for partners or proxies that turned CRLF
	// into LF). The bytes that verified are always the MIC input.
	StrictLineEndings bool
	// ContentOnlyCompressedMIC takes the MIC of a compressed, unsigned,
	// unencrypted message over the decompressed content without its MIME
	// headers, for senders that digest it so. The default follows RFC 5402
	// §4: the uncompressed data including all its MIME header fields.
	ContentOnlyCompressedMIC bool
}

// Result is an unwrapped AS2 message.
type Result struct {
	// Payload is the business document, transfer decoding removed.
	Payload []byte
	// ContentType is the payload's Content-Type value as sent, or the
	// default for a bare payload; MediaType is its lowercased type/subtype.
	ContentType string
	MediaType   string
	// Filename is the Content-Disposition filename (partner input: sanitise
	// before use as a path).
	Filename string
	// Entity is the payload entity (for multipart payloads, call Parts);
	// nil for a bare payload.
	Entity *Entity
	// Bare is true when the payload had no MIME header block (quirk 3).
	Bare bool

	// Signed is true when a signature layer was verified; Signer describes
	// the first (outermost) one. MICAlgParam is the micalg parameter of
	// multipart/signed as sent (informational; the digest actually used is
	// Signer.DigestAlg).
	Signed      bool
	Signer      *cms.Signer
	MICAlgParam string
	// LineEndingsRepaired is true when the signature verified only after
	// converting the signed part's line ends to CRLF.
	LineEndingsRepaired bool

	// Encrypted is true when an enveloped layer was decrypted; Decryption
	// describes the first one.
	Encrypted  bool
	Decryption cms.DecryptInfo
	// Compressed is true when a compressed layer was inflated.
	Compressed bool

	// Layers lists the S/MIME layers, outermost first (Layer* constants).
	Layers []string

	micInput []byte
}

func (o *Options) now() time.Time {
	if o.Now == nil {
		return time.Now()
	}
	return o.Now()
}

// Unwrap parses raw as a MIME entity (see ParseEntity) and unwraps it; see
// UnwrapEntity.
func Unwrap(raw []byte, opts Options) (*Result, error) {
	e, err := ParseEntity(raw)
	if err != nil {
		return nil, fmt.Errorf("smime: %w", err)
	}
	return UnwrapEntity(e, opts)
}

// layerLimits is the options' limits with their defaults: layers, bytes
// per layer, compression ratio (0: none) and nested compressed layers.
func (opts Options) layerLimits() (maxLayers int, maxSize int64, maxRatio float64, maxCompressed int) {
	maxLayers, maxSize, maxRatio, maxCompressed = opts.MaxLayers, opts.MaxSize, opts.MaxRatio, opts.MaxCompressedLayers
	if maxLayers <= 0 {
		maxLayers = DefaultMaxLayers
	}
	if maxSize <= 0 {
		maxSize = DefaultMaxSize
	}
	switch {
	case maxRatio == 0:
		maxRatio = limits.DefaultMaxCompressionRatio
	case maxRatio < 0:
		maxRatio = 0
	}
	if maxCompressed <= 0 {
		maxCompressed = limits.DefaultMaxCompressedLayers
	}
	return maxLayers, maxSize, maxRatio, maxCompressed
}

// UnwrapEntity removes the S/MIME layers of an inbound AS2 entity in
// whatever order they come: application/pkcs7-mime (or x-pkcs7-mime, or
// octet-stream named *.p7m/*.p7z) holding EnvelopedData, AuthEnvelopedData,
// CompressedData or opaque SignedData — dispatched on the CMS content type
// itself, smime-type being only a hint — and multipart/signed with an
// application/pkcs7-signature (or x-pkcs7-signature) part, verified over the
// first part's exact bytes. Decrypted or decompressed content without a MIME
// header block is a bare payload.
//
// On error the returned Result (non-nil once parsing started) tells which
// layers were already removed, so the caller can pick the disposition.
// Errors wrap ErrMalformedMIME or the cms sentinels: cms.ErrNoRecipient and
// cms.ErrDecrypt (decryption-failed), cms.ErrUnknownSigner and
// cms.ErrCertificateExpired (authentication-failed), cms.ErrBadSignature
// (integrity-check-failed), cms.ErrMalformed, cms.ErrUnsupportedAlgorithm,
// cms.ErrTooLarge.
func UnwrapEntity(e *Entity, opts Options) (*Result, error) {
	maxLayers, maxSize, maxRatio, maxCompressed := opts.layerLimits()
	// Across nested compressed layers: the output of all of them and the
	// outermost layer's compressed size, for the total caps.
	var inflated, compressedBase int64
	compressedLayers := 0
	res := &Result{}
	cur := e
	var innerUnsigned []byte // MIC input for unsigned messages (decrypted / decompressed entity)
	for {
		if len(res.Layers) > maxLayers {
			return res, fmt.Errorf("smime: %w: more than %d S/MIME layers", ErrMalformedMIME, maxLayers)
		}
		mt, params, err := cur.MediaType()
		if err != nil {
			return res, fmt.Errorf("smime: %w", err)
		}

		if mt == "multipart/signed" {
			content, err := res.verifyMultipartSigned(cur, params, opts)
			if err != nil {
				return res, fmt.Errorf("smime: %w", err)
			}
			cur = content
			continue
		}

		if !isPKCS7Mime(mt, params, cur) {
			break // the payload entity
		}
		der, err := cmsBody(cur)
		if err != nil {
			return res, fmt.Errorf("smime: %w", err)
		}
		kind, err := cms.ContentType(der)
		if err != nil {
			return res, fmt.Errorf("smime: %s: %w", mt, err)
		}
		var inner []byte
		switch kind {
		case cms.TypeEnvelopedData, cms.TypeAuthEnvelopedData:
			res.Layers = append(res.Layers, LayerEncrypted)
			plain, info, err := cms.Decrypt(der, opts.Keys)
			if !res.Encrypted {
				res.Decryption = info
			}
			if err != nil {
				return res, fmt.Errorf("smime: %w", err)
			}
			res.Encrypted = true
			inner = plain
		case cms.TypeCompressedData:
			res.Layers = append(res.Layers, LayerCompressed)
			if compressedLayers++; compressedLayers > maxCompressed {
				return res, fmt.Errorf("smime: more than %d nested compressed layers: %w", maxCompressed, cms.ErrTooLarge)
			}
			if compressedBase == 0 {
				compressedBase = int64(len(der))
			}
			lim := limits.Inflation{MaxBytes: maxSize, MaxRatio: maxRatio, SpoolDir: opts.SpoolDir}
			var reserved int64
			plain, err := cms.DecompressLimited(der, lim, func(n int64) error {
				if inflated+n > maxSize {
					return fmt.Errorf("compressed layers inflate beyond %d bytes in total: %w", maxSize, limits.ErrTooLarge)
				}
				if err := lim.CheckRatio(inflated+n, compressedBase); err != nil {
					return fmt.Errorf("compressed layers in total: %w", err)
				}
				if opts.Reserve != nil && n > reserved {
					if err := opts.Reserve(n - reserved); err != nil {
						return err
					}
					reserved = n
				}
				return nil
			})
			if err != nil {
				return res, fmt.Errorf("smime: %w", err)
			}
			inflated += int64(len(plain))
			res.Compressed = true
			inner = plain
		case cms.TypeSignedData:
			res.Layers = append(res.Layers, LayerSignedOpaque)
			content, signer, err := cms.VerifyAttachedCheck(der, opts.Trusted, opts.now(), opts.CheckSigner)
			if err != nil {
				return res, fmt.Errorf("smime: %w", err)
			}
			if !res.Signed {
				res.Signed, res.Signer, res.micInput = true, signer, content
			}
			inner = content
		default:
			return res, fmt.Errorf("smime: %s holds CMS %s: %w", mt, kind, cms.ErrUnsupportedAlgorithm)
		}
		innerUnsigned = inner
		next := parseInner(inner)
		if next == nil {
			res.Bare = true
			res.Payload = inner
			res.ContentType = opts.DefaultContentType
			if res.ContentType == "" {
				res.ContentType = DefaultContentType
			}
			res.MediaType, _, _ = parseMediaType(res.ContentType)
			res.setUnsignedMIC(inner, inner, opts)
			return res, nil
		}
		cur = next
	}

	payload, err := cur.DecodedBody()
	if err != nil {
		return res, fmt.Errorf("smime: payload: %w", err)
	}
	res.Payload = payload
	res.Entity = cur
	res.ContentType = cur.Header.Get("Content-Type")
	res.MediaType, _, _ = cur.MediaType()
	if res.ContentType == "" {
		res.ContentType = res.MediaType
	}
	res.Filename = cur.Filename()
	res.setUnsignedMIC(innerUnsigned, payload, opts)
	return res, nil
}

// setUnsignedMIC sets the MIC input of an unsigned message: RFC 4130 §7.3.1
// takes an encrypted, unsigned message's MIC over the decrypted entity with
// its MIME headers, and RFC 5402 §4 an unsigned compressed one's over the
// uncompressed data including all MIME header fields (encrypted or not,
// unless opts.ContentOnlyCompressedMIC); a plain message's MIC is over its
// content without headers.
func (r *Result) setUnsignedMIC(innerEntity, content []byte, opts Options) {
	if r.Signed {
		return
	}
	if r.Encrypted || r.Compressed && !opts.ContentOnlyCompressedMIC {
		r.micInput = innerEntity
		return
	}
	r.micInput = content
}

// cmsBody returns the DER/BER of an application/pkcs7-mime entity. Beyond
// the declared transfer encoding it accepts the two mistakes senders make:
// a base64 label on a binary body, and a base64 body without a label.
func cmsBody(e *Entity) ([]byte, error) {
	der, err := e.DecodedBody()
	looksDER := func(b []byte) bool { return len(b) > 1 && b[0] == 0x30 }
	if err != nil {
		if looksDER(e.Body) {
			return e.Body, nil
		}
		return nil, err
	}
	if !looksDER(der) {
		if b, err := decodeTransfer("base64", der); err == nil && looksDER(b) {
			return b, nil
		}
	}
	return der, nil
}

func isPKCS7Mime(mt string, params map[string]string, e *Entity) bool {
	switch mt {
	case "application/pkcs7-mime", "application/x-pkcs7-mime":
		return true
	case "application/octet-stream":
		name := strings.ToLower(params["name"])
		if name == "" {
			name = strings.ToLower(e.Filename())
		}
		return strings.HasSuffix(name, ".p7m") || strings.HasSuffix(name, ".p7z")
	}
	return false
}

// verifyMultipartSigned verifies a multipart/signed entity and returns its
// content part.
func (r *Result) verifyMultipartSigned(e *Entity, params map[string]string, opts Options) (*Entity, error) {
	r.Layers = append(r.Layers, LayerSigned)
	if p := strings.ToLower(params["protocol"]); p != "" && p != "application/pkcs7-signature" && p != "application/x-pkcs7-signature" {
		return nil, fmt.Errorf("multipart/signed protocol %q: %w", p, cms.ErrUnsupportedAlgorithm)
	}
	parts, err := e.Parts()
	if err != nil {
		return nil, fmt.Errorf("multipart/signed: %w", err)
	}
	if len(parts) != 2 {
		return nil, fmt.Errorf("%w: multipart/signed with %d parts", ErrMalformedMIME, len(parts))
	}
	smt, _, err := parts[1].MediaType()
	if err != nil {
		return nil, fmt.Errorf("signature part: %w", err)
	}
	if smt != "application/pkcs7-signature" && smt != "application/x-pkcs7-signature" {
		return nil, fmt.Errorf("%w: signature part is %s", ErrMalformedMIME, smt)
	}
	sig, err := parts[1].DecodedBody()
	if err != nil {
		return nil, fmt.Errorf("signature part: %w", err)
	}
	signed := parts[0].Raw
	candidates := [][]byte{signed}
	if !opts.StrictLineEndings {
		candidates = appendLineEndingRepairs(candidates, signed)
	}
	now := opts.now()
	var errs []error
	for i, c := range candidates {
		s, err := cms.VerifyDetachedCheck(sig, c, opts.Trusted, now, opts.CheckSigner)
		if err == nil {
			if !r.Signed {
				r.Signed, r.Signer, r.micInput = true, s, c
				r.MICAlgParam = params["micalg"]
				r.LineEndingsRepaired = i > 0
			}
			return parts[0], nil
		}
		errs = append(errs, err)
		if !errors.Is(err, cms.ErrBadSignature) {
			break // only a digest mismatch can be a line-ending problem
		}
	}
	return nil, verificationError(errs)
}

// verificationError classifies the failed verification attempts of one
// signature (the exact bytes, then the line-ending repairs) regardless of
// their order: if any attempt verified cryptographically but its
// certificate is not valid now, that is the reason (authentication-failed
// naming the certificate), since the other attempts only failed on bytes
// that were not the signed ones; otherwise the first attempt's error.
func verificationError(errs []error) error {
	for _, err := range errs {
		if errors.Is(err, cms.ErrCertificateExpired) {
			return err
		}
	}
	if len(errs) == 0 {
		return fmt.Errorf("%w: no verification attempt", cms.ErrBadSignature)
	}
	return errs[0]
}

// appendLineEndingRepairs adds the signed part with its header block's bare
// LFs turned into CRLF (body untouched: binary content is signed as is,
// quirk 2), then with every bare LF turned into CRLF (RFC 5751 text
// canonicalisation), skipping variants equal to one already listed.
func appendLineEndingRepairs(cands [][]byte, part []byte) [][]byte {
	if !hasBareLF(part) {
		return cands
	}
	_, bodyStart, err := parseHeaderBlock(part)
	if err == nil {
		h := toCRLF(part[:bodyStart])
		v := make([]byte, 0, len(h)+len(part)-bodyStart)
		v = append(append(v, h...), part[bodyStart:]...)
		if !bytes.Equal(v, part) {
			cands = append(cands, v)
		}
	}
	all := toCRLF(part)
	if !bytes.Equal(all, cands[len(cands)-1]) {
		cands = append(cands, all)
	}
	return cands
}

func hasBareLF(b []byte) bool {
	for i, c := range b {
		if c == '\n' && (i == 0 || b[i-1] != '\r') {
			return true
		}
	}
	return false
}

func toCRLF(b []byte) []byte {
	out := make([]byte, 0, len(b)+len(b)/32)
	for i, c := range b {
		if c == '\n' && (i == 0 || b[i-1] != '\r') {
			out = append(out, '\r')
		}
		out = append(out, c)
	}
	return out
}

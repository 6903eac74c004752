package cms

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/subtle"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/edigateway/gateway/internal/trust"
)

// Signer describes a verified SignerInfo.
type Signer struct {
	// Cert is the trusted (configured) certificate whose key verified the
	// signature. Certificates embedded in the CMS are never used.
	Cert *x509.Certificate
	// DigestAlg is "md5", "sha1", "sha224", "sha256", "sha384" or "sha512".
	// MD5 verifies like the others; refusing it is the caller's policy.
	DigestAlg string
	// Digest is the digest of the signed content: the messageDigest signed
	// attribute, or the computed digest when there are no signed attributes.
	Digest []byte
	// PSS is true for RSASSA-PSS signatures, false for RSA PKCS#1 v1.5.
	PSS bool
	// SigningTime is the signingTime signed attribute (zero if absent).
	SigningTime time.Time
}

type signedData struct {
	Version          int
	DigestAlgorithms []pkix.AlgorithmIdentifier `asn1:"set"`
	EncapContentInfo encapContentInfo
	Certificates     asn1.RawValue   `asn1:"optional,tag:0"`
	CRLs             asn1.RawValue   `asn1:"optional,tag:1"`
	SignerInfos      []asn1.RawValue `asn1:"set"`
}

type encapContentInfo struct {
	EContentType asn1.ObjectIdentifier
	EContent     asn1.RawValue `asn1:"explicit,optional,tag:0"`
}

type signerInfo struct {
	Version            int
	SID                asn1.RawValue
	DigestAlgorithm    pkix.AlgorithmIdentifier
	SignedAttrs        asn1.RawValue `asn1:"optional,tag:0"`
	SignatureAlgorithm pkix.AlgorithmIdentifier
	Signature          []byte
	UnsignedAttrs      asn1.RawValue `asn1:"optional,tag:1"`
}

type pssParameters struct {
	Hash         pkix.AlgorithmIdentifier `asn1:"optional,explicit,tag:0"`
	MGF          pkix.AlgorithmIdentifier `asn1:"optional,explicit,tag:1"`
	SaltLength   int                      `asn1:"optional,explicit,tag:2,default:20"`
	TrailerField int                      `asn1:"optional,explicit,tag:3,default:1"`
}

func parseSignedData(in []byte) (*signedData, error) {
	oid, content, err := parseContentInfo(in)
	if err != nil {
		return nil, err
	}
	if !oid.Equal(oidSignedData) {
		return nil, fmt.Errorf("%w: content type %s is not signed-data", ErrMalformed, contentTypeName(oid))
	}
	var sd signedData
	if err := unmarshalAll(content, &sd); err != nil {
		return nil, fmt.Errorf("SignedData: %w", err)
	}
	return &sd, nil
}

// certificates parses the embedded certificates, skipping the ones that do
// not parse and the non-X.509 choices of CertificateChoices.
func (sd *signedData) certificates() ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := sd.Certificates.Bytes
	for len(rest) > 0 {
		var raw asn1.RawValue
		var err error
		rest, err = asn1.Unmarshal(rest, &raw)
		if err != nil {
			return certs, fmt.Errorf("%w: certificates: %v", ErrMalformed, err)
		}
		if raw.Class != asn1.ClassUniversal || raw.Tag != asn1.TagSequence {
			continue
		}
		if c, err := x509.ParseCertificate(raw.FullBytes); err == nil {
			certs = append(certs, c)
		}
	}
	return certs, nil
}

// VerifyDetached verifies a detached SignedData signature (DER or BER) over
// content, which must be exactly the signed bytes (for AS2 the first part of
// multipart/signed as sent). The signer must be one of trusted, matched by
// issuer and serial number or subject key identifier; certificates embedded
// in the signature are ignored, so one of them counts only when it is a
// trusted certificate. When now is not zero the trusted certificate must be
// valid at now.
//
// Supported: digests SHA-1, SHA-224/256/384/512 and MD5 (reported, so policy
// can refuse it); RSA PKCS#1 v1.5 and RSASSA-PSS; with signed attributes
// (messageDigest and contentType are checked) or without.
//
// Errors wrap ErrUnknownSigner (no SignerInfo from a trusted certificate),
// ErrBadSignature (digest or signature mismatch), ErrCertificateExpired,
// ErrUnsupportedAlgorithm or ErrMalformed.
func VerifyDetached(sig, content []byte, trusted []*x509.Certificate, now time.Time) (*Signer, error) {
	sd, err := parseSignedData(sig)
	if err != nil {
		return nil, fmt.Errorf("cms: verify: %w", err)
	}
	if len(sd.EncapContentInfo.EContent.FullBytes) != 0 {
		// Accept an attached signature only when its content is the same.
		inner, err := eContent(sd)
		if err != nil {
			return nil, fmt.Errorf("cms: verify: %w", err)
		}
		if !bytes.Equal(inner, content) {
			return nil, fmt.Errorf("cms: verify: signature carries different content: %w", ErrBadSignature)
		}
	}
	s, err := sd.verify(content, trusted, now)
	if err != nil {
		return nil, fmt.Errorf("cms: verify: %w", err)
	}
	return s, nil
}

// VerifyAttached verifies an encapsulating SignedData (S/MIME
// application/pkcs7-mime; smime-type=signed-data) with the same rules as
// VerifyDetached and returns the signed content.
func VerifyAttached(in []byte, trusted []*x509.Certificate, now time.Time) ([]byte, *Signer, error) {
	sd, err := parseSignedData(in)
	if err != nil {
		return nil, nil, fmt.Errorf("cms: verify: %w", err)
	}
	content, err := eContent(sd)
	if err != nil {
		return nil, nil, fmt.Errorf("cms: verify: %w", err)
	}
	s, err := sd.verify(content, trusted, now)
	if err != nil {
		return nil, nil, fmt.Errorf("cms: verify: %w", err)
	}
	return content, s, nil
}

// SignerCheck decides whether a certificate whose key verified a signature
// is trusted; embedded are the certificates the SignedData carried (chain
// material). Its error is returned wrapped by the Verify*Check functions.
// It also judges a signer whose certificate is not valid at the
// verification time: its refusal then replaces the
// *CertificateValidityError (see checkInvalid).
type SignerCheck func(signer *x509.Certificate, embedded []*x509.Certificate) error

// VerifyDetachedCheck is VerifyDetached for CA trust: the signer may also
// be one of the certificates embedded in the signature, and a signer that
// verified the signature is then accepted only if check accepts it (which
// checks the chain, key usage, name and revocation). check runs only after
// the signature verified, so that nothing is looked up for forged messages.
func VerifyDetachedCheck(sig, content []byte, trusted []*x509.Certificate, now time.Time, check SignerCheck) (*Signer, error) {
	sd, err := parseSignedData(sig)
	if err != nil {
		return nil, fmt.Errorf("cms: verify: %w", err)
	}
	if len(sd.EncapContentInfo.EContent.FullBytes) != 0 {
		inner, err := eContent(sd)
		if err != nil {
			return nil, fmt.Errorf("cms: verify: %w", err)
		}
		if !bytes.Equal(inner, content) {
			return nil, fmt.Errorf("cms: verify: signature carries different content: %w", ErrBadSignature)
		}
	}
	s, err := sd.verifyCheck(content, trusted, now, check)
	if err != nil {
		return nil, fmt.Errorf("cms: verify: %w", err)
	}
	return s, nil
}

// VerifyAttachedCheck is VerifyAttached with the rules of
// VerifyDetachedCheck.
func VerifyAttachedCheck(in []byte, trusted []*x509.Certificate, now time.Time, check SignerCheck) ([]byte, *Signer, error) {
	sd, err := parseSignedData(in)
	if err != nil {
		return nil, nil, fmt.Errorf("cms: verify: %w", err)
	}
	content, err := eContent(sd)
	if err != nil {
		return nil, nil, fmt.Errorf("cms: verify: %w", err)
	}
	s, err := sd.verifyCheck(content, trusted, now, check)
	if err != nil {
		return nil, nil, fmt.Errorf("cms: verify: %w", err)
	}
	return content, s, nil
}

func (sd *signedData) verifyCheck(content []byte, trusted []*x509.Certificate, now time.Time, check SignerCheck) (*Signer, error) {
	if check == nil {
		return sd.verify(content, trusted, now)
	}
	embedded, _ := sd.certificates()
	candidates := append(append([]*x509.Certificate{}, trusted...), embedded...)
	s, err := sd.verify(content, candidates, now)
	if err != nil {
		return nil, checkInvalid(err, check, embedded)
	}
	if err := check(s.Cert, embedded); err != nil {
		return nil, err
	}
	return s, nil
}

// checkInvalid gives check the say on a signature that verified with a
// certificate not valid at the verification time (err a
// *CertificateValidityError), so that a CA trust check refuses it in its
// own words and records its decision as it does for every other signer;
// check's refusal replaces err. Any other err is returned as it is.
func checkInvalid(err error, check SignerCheck, embedded []*x509.Certificate) error {
	var ve *CertificateValidityError
	if check == nil || !errors.As(err, &ve) || ve.Cert == nil {
		return err
	}
	if cerr := check(ve.Cert, embedded); cerr != nil {
		return cerr
	}
	return err
}

func eContent(sd *signedData) ([]byte, error) {
	ec := sd.EncapContentInfo.EContent
	if len(ec.FullBytes) == 0 {
		return nil, fmt.Errorf("%w: detached signature has no content", ErrMalformed)
	}
	var content []byte
	if err := unmarshalAll(ec.Bytes, &content); err != nil {
		return nil, fmt.Errorf("eContent: %w", err)
	}
	return content, nil
}

func (sd *signedData) verify(content []byte, trusted []*x509.Certificate, now time.Time) (*Signer, error) {
	return sd.verifyDigests(func(h crypto.Hash) []byte {
		d := h.New()
		d.Write(content)
		return d.Sum(nil)
	}, trusted, now)
}

// verifyDigests is verify with the content's digest under each hash given
// by digestOf (computed over a stream, or over bytes in memory).
func (sd *signedData) verifyDigests(digestOf func(crypto.Hash) []byte, trusted []*x509.Certificate, now time.Time) (*Signer, error) {
	if len(sd.SignerInfos) == 0 {
		return nil, fmt.Errorf("%w: no SignerInfo", ErrMalformed)
	}
	var firstErr error
	for _, raw := range sd.SignerInfos {
		var si signerInfo
		if err := unmarshalAll(raw.FullBytes, &si); err != nil {
			return nil, fmt.Errorf("SignerInfo: %w", err)
		}
		for _, cert := range trusted {
			if cert == nil || !identifierMatches(si.SID, cert) {
				continue
			}
			s, err := verifySignerInfo(&si, sd.EncapContentInfo.EContentType, digestOf, cert, now)
			if err == nil {
				return s, nil
			}
			// A signature that verified with an expired certificate is the
			// reason, whichever signer info or certificate came first.
			if firstErr == nil || errors.Is(err, ErrCertificateExpired) && !errors.Is(firstErr, ErrCertificateExpired) {
				firstErr = err
			}
		}
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return nil, fmt.Errorf("%w: %d signer infos, %d trusted certificates", ErrUnknownSigner, len(sd.SignerInfos), len(trusted))
}

func verifySignerInfo(si *signerInfo, eContentType asn1.ObjectIdentifier, digestOf func(crypto.Hash) []byte, cert *x509.Certificate, now time.Time) (*Signer, error) {
	d, ok := digestByOID(si.DigestAlgorithm.Algorithm)
	if !ok {
		return nil, fmt.Errorf("digest %s: %w", si.DigestAlgorithm.Algorithm, ErrUnsupportedAlgorithm)
	}
	pub, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("signer key %T: %w", cert.PublicKey, ErrUnsupportedAlgorithm)
	}
	computed := digestOf(d.hash)

	s := &Signer{Cert: cert, DigestAlg: d.name, Digest: computed}
	var signed []byte // the bytes the signature covers, when not the content itself
	if len(si.SignedAttrs.FullBytes) > 0 {
		attrs, err := parseAttributes(si.SignedAttrs.Bytes)
		if err != nil {
			return nil, fmt.Errorf("signed attributes: %w", err)
		}
		var md []byte
		if err := attrs.single(oidAttrMessageDigest, &md); err != nil {
			return nil, fmt.Errorf("messageDigest attribute: %w", err)
		}
		var ct asn1.ObjectIdentifier
		if err := attrs.single(oidAttrContentType, &ct); err != nil {
			return nil, fmt.Errorf("contentType attribute: %w", err)
		}
		if !ct.Equal(eContentType) {
			return nil, fmt.Errorf("%w: contentType attribute %s differs from %s", ErrBadSignature, ct, eContentType)
		}
		var st time.Time
		if attrs.single(oidAttrSigningTime, &st) == nil {
			s.SigningTime = st
		}
		if subtle.ConstantTimeCompare(md, computed) != 1 {
			return nil, fmt.Errorf("%w: message digest mismatch (%s)", ErrBadSignature, d.name)
		}
		s.Digest = md
		// RFC 5652 §5.4: the signature covers the DER of the attributes
		// with an explicit SET OF tag instead of [0] IMPLICIT.
		signed = append([]byte{0x31}, si.SignedAttrs.FullBytes[1:]...)
	}

	alg := si.SignatureAlgorithm.Algorithm
	switch {
	case alg.Equal(oidRSASSAPSS):
		opts, err := pssOptions(si.SignatureAlgorithm.Parameters, d.hash)
		if err != nil {
			return nil, err
		}
		if err := rsa.VerifyPSS(pub, d.hash, signedDigest(d.hash, signed, computed), si.Signature, opts); err != nil {
			return nil, fmt.Errorf("%w: RSA-PSS: %v", ErrBadSignature, err)
		}
		s.PSS = true
	case isPKCS1SignatureOID(alg, d.hash):
		if err := rsa.VerifyPKCS1v15(pub, d.hash, signedDigest(d.hash, signed, computed), si.Signature); err != nil {
			return nil, fmt.Errorf("%w: RSA PKCS#1 v1.5: %v", ErrBadSignature, err)
		}
	default:
		return nil, fmt.Errorf("signature algorithm %s with digest %s: %w", alg, d.name, ErrUnsupportedAlgorithm)
	}

	if !now.IsZero() && (now.Before(cert.NotBefore) || now.After(cert.NotAfter)) {
		return nil, &CertificateValidityError{Subject: cert.Subject.CommonName, Serial: trust.Serial(cert),
			NotBefore: cert.NotBefore, NotAfter: cert.NotAfter, At: now, Cert: cert}
	}
	return s, nil
}

// signedDigest is the digest the signature is over: of the signed
// attributes when there are any, else the content's own digest.
func signedDigest(h crypto.Hash, signedAttrs, contentDigest []byte) []byte {
	if signedAttrs == nil {
		return contentDigest
	}
	d := h.New()
	d.Write(signedAttrs)
	return d.Sum(nil)
}

// CertificateValidityError reports a signature that verified
// cryptographically with a trusted certificate that is not valid at the
// verification time (expired or not yet valid). It wraps
// ErrCertificateExpired.
type CertificateValidityError struct {
	Subject             string // the certificate's common name
	Serial              string // serial number as trust.Serial writes it
	NotBefore, NotAfter time.Time
	At                  time.Time // the verification time
	// Cert is the certificate (for trust.CheckValidity's wording).
	Cert *x509.Certificate
}

func (e *CertificateValidityError) Error() string {
	return fmt.Sprintf("%v: %q valid %s to %s, now %s", ErrCertificateExpired, e.Subject,
		e.NotBefore.UTC().Format(time.RFC3339), e.NotAfter.UTC().Format(time.RFC3339), e.At.UTC().Format(time.RFC3339))
}

func (e *CertificateValidityError) Unwrap() error { return ErrCertificateExpired }

// isPKCS1SignatureOID accepts rsaEncryption (the usual CMS spelling) and the
// hash-specific PKCS#1 v1.5 OIDs when they agree with the digest algorithm.
func isPKCS1SignatureOID(alg asn1.ObjectIdentifier, h crypto.Hash) bool {
	switch {
	case alg.Equal(oidRSAEncryption):
		return true
	case alg.Equal(oidMD5WithRSA):
		return h == crypto.MD5
	case alg.Equal(oidSHA1WithRSA):
		return h == crypto.SHA1
	case alg.Equal(oidSHA224WithRSA):
		return h == crypto.SHA224
	case alg.Equal(oidSHA256WithRSA):
		return h == crypto.SHA256
	case alg.Equal(oidSHA384WithRSA):
		return h == crypto.SHA384
	case alg.Equal(oidSHA512WithRSA):
		return h == crypto.SHA512
	}
	return false
}

// pssOptions decodes RSASSA-PSS-params (RFC 4055 §3.1). The hash must be the
// SignerInfo digest and MGF1 must use the same hash (crypto/rsa's model).
func pssOptions(params asn1.RawValue, h crypto.Hash) (*rsa.PSSOptions, error) {
	p := pssParameters{SaltLength: 20, TrailerField: 1}
	if len(params.FullBytes) > 0 && !(params.Class == asn1.ClassUniversal && params.Tag == asn1.TagNull) {
		if err := unmarshalAll(params.FullBytes, &p); err != nil {
			return nil, fmt.Errorf("RSA-PSS parameters: %w", err)
		}
	}
	ph := crypto.SHA1
	if len(p.Hash.Algorithm) > 0 {
		d, ok := digestByOID(p.Hash.Algorithm)
		if !ok {
			return nil, fmt.Errorf("RSA-PSS hash %s: %w", p.Hash.Algorithm, ErrUnsupportedAlgorithm)
		}
		ph = d.hash
	}
	mh := crypto.SHA1
	if len(p.MGF.Algorithm) > 0 {
		var err error
		if mh, err = mgf1Hash(p.MGF); err != nil {
			return nil, fmt.Errorf("RSA-PSS: %w", err)
		}
	}
	if ph != h || mh != h {
		return nil, fmt.Errorf("RSA-PSS hash %v / MGF1 %v with digest %v: %w", ph, mh, h, ErrUnsupportedAlgorithm)
	}
	if p.TrailerField != 1 || p.SaltLength < 0 || p.SaltLength > 1024 {
		return nil, fmt.Errorf("%w: RSA-PSS trailer %d salt %d", ErrMalformed, p.TrailerField, p.SaltLength)
	}
	return &rsa.PSSOptions{SaltLength: p.SaltLength, Hash: h}, nil
}

type attributes []attribute

func parseAttributes(der []byte) (attributes, error) {
	var attrs attributes
	for rest := der; len(rest) > 0; {
		var a attribute
		var err error
		rest, err = asn1.Unmarshal(rest, &a)
		if err != nil {
			return nil, fmt.Errorf("%w: attribute: %v", ErrMalformed, err)
		}
		attrs = append(attrs, a)
	}
	return attrs, nil
}

var errNoAttribute = errors.New("attribute absent")

// single decodes the one value of the attribute typ into out. An attribute
// that is repeated or has several values is malformed (RFC 5652 §11).
func (attrs attributes) single(typ asn1.ObjectIdentifier, out any) error {
	found := false
	for _, a := range attrs {
		if !a.Type.Equal(typ) {
			continue
		}
		if found {
			return fmt.Errorf("%w: attribute %s repeated", ErrMalformed, typ)
		}
		found = true
		if err := unmarshalAll(a.Values.Bytes, out); err != nil {
			return fmt.Errorf("attribute %s: %w", typ, err)
		}
	}
	if !found {
		return fmt.Errorf("%w: %s", errNoAttribute, typ)
	}
	return nil
}

// SignOptions tunes Sign.
type SignOptions struct {
	// Digest is the digest name in any spelling NormalizeDigest accepts;
	// empty means sha256.
	Digest string
	// PSS selects RSASSA-PSS (salt length = digest length, MGF1 with the
	// same digest) instead of RSA PKCS#1 v1.5.
	PSS bool
	// Attached embeds the content (opaque signed-data) instead of producing
	// a detached signature.
	Attached bool
	// SigningTime is the signingTime attribute; zero means time.Now().
	SigningTime time.Time
	// Chain are more certificates to embed after cert (intermediates for
	// a receiver that trusts a CA).
	Chain []*x509.Certificate
	// ContentDigest, when set, is the content's digest under Digest,
	// computed by the caller over a stream (content is then not read; a
	// detached signature only).
	ContentDigest []byte
}

// SignDetached signs content with an RSA key (PKCS#1 v1.5) and returns a
// detached SignedData (DER) with signed attributes (contentType,
// signingTime, messageDigest) and cert embedded, as AS2 multipart/signed
// and MDNs need.
func SignDetached(content []byte, cert *x509.Certificate, key crypto.Signer, digest string) ([]byte, error) {
	return Sign(content, cert, key, SignOptions{Digest: digest})
}

// Sign signs content with cert's RSA key and returns a SignedData (DER) with
// signed attributes and cert embedded; see SignOptions.
func Sign(content []byte, cert *x509.Certificate, key crypto.Signer, opts SignOptions) ([]byte, error) {
	if cert == nil || key == nil {
		return nil, errors.New("cms: sign: certificate and key are required")
	}
	if _, ok := key.Public().(*rsa.PublicKey); !ok {
		return nil, fmt.Errorf("cms: sign: key %T: %w", key.Public(), ErrUnsupportedAlgorithm)
	}
	name := opts.Digest
	if name == "" {
		name = DigestSHA256
	}
	n, err := NormalizeDigest(name)
	if err != nil {
		return nil, fmt.Errorf("cms: sign: %w", err)
	}
	d, _ := digestByName(n)
	md := opts.ContentDigest
	switch {
	case md != nil && (opts.Attached || len(md) != d.hash.Size()):
		return nil, errors.New("cms: sign: ContentDigest is for detached signatures with a digest of the right size")
	case md == nil:
		h := d.hash.New()
		h.Write(content)
		md = h.Sum(nil)
	}

	st := opts.SigningTime
	if st.IsZero() {
		st = time.Now()
	}
	attrs, err := marshalSignedAttributes(md, st.UTC())
	if err != nil {
		return nil, fmt.Errorf("cms: sign: %w", err)
	}
	signed := append([]byte{0x31}, attrs[1:]...)
	hs := d.hash.New()
	hs.Write(signed)

	sigAlg := pkix.AlgorithmIdentifier{Algorithm: oidRSAEncryption, Parameters: asn1.NullRawValue}
	var sig []byte
	if opts.PSS {
		sig, err = key.Sign(rand.Reader, hs.Sum(nil), &rsa.PSSOptions{SaltLength: d.hash.Size(), Hash: d.hash})
		if err != nil {
			return nil, fmt.Errorf("cms: sign: %w", err)
		}
		params, err := marshalPSSParams(d)
		if err != nil {
			return nil, fmt.Errorf("cms: sign: %w", err)
		}
		sigAlg = pkix.AlgorithmIdentifier{Algorithm: oidRSASSAPSS, Parameters: asn1.RawValue{FullBytes: params}}
	} else {
		sig, err = key.Sign(rand.Reader, hs.Sum(nil), d.hash)
		if err != nil {
			return nil, fmt.Errorf("cms: sign: %w", err)
		}
	}

	sid, err := marshalIssuerAndSerial(cert)
	if err != nil {
		return nil, fmt.Errorf("cms: sign: %w", err)
	}
	si, err := asn1.Marshal(signerInfo{
		Version:            1,
		SID:                sid,
		DigestAlgorithm:    pkix.AlgorithmIdentifier{Algorithm: d.oid},
		SignedAttrs:        asn1.RawValue{FullBytes: attrs},
		SignatureAlgorithm: sigAlg,
		Signature:          sig,
	})
	if err != nil {
		return nil, fmt.Errorf("cms: sign: %w", err)
	}
	certs := append([]byte{}, cert.Raw...)
	for _, c := range opts.Chain {
		certs = append(certs, c.Raw...)
	}
	sd := signedData{
		Version:          1,
		DigestAlgorithms: []pkix.AlgorithmIdentifier{{Algorithm: d.oid}},
		EncapContentInfo: encapContentInfo{EContentType: oidData},
		Certificates:     asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: certs},
		SignerInfos:      []asn1.RawValue{{FullBytes: si}},
	}
	if opts.Attached {
		oct, err := asn1.Marshal(content)
		if err != nil {
			return nil, fmt.Errorf("cms: sign: %w", err)
		}
		sd.EncapContentInfo.EContent = asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: oct}
	}
	return marshalContentInfo(oidSignedData, sd)
}

// marshalSignedAttributes returns the [0] IMPLICIT SET OF Attribute
// encoding, elements in DER (sorted) order.
func marshalSignedAttributes(md []byte, signingTime time.Time) ([]byte, error) {
	values := []struct {
		typ asn1.ObjectIdentifier
		v   any
	}{
		{oidAttrContentType, oidData},
		{oidAttrSigningTime, signingTime},
		{oidAttrMessageDigest, md},
	}
	var enc [][]byte
	for _, a := range values {
		v, err := asn1.Marshal(a.v)
		if err != nil {
			return nil, err
		}
		b, err := asn1.Marshal(attribute{
			Type:   a.typ,
			Values: asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSet, IsCompound: true, Bytes: v},
		})
		if err != nil {
			return nil, err
		}
		enc = append(enc, b)
	}
	sort.Slice(enc, func(i, j int) bool { return bytes.Compare(enc[i], enc[j]) < 0 })
	return asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: bytes.Join(enc, nil)})
}

// marshalPSSParams encodes RSASSA-PSS-params for digest d with MGF1 over d
// and salt length = digest length, omitting DER default values.
func marshalPSSParams(d digestAlg) ([]byte, error) {
	type params struct {
		Hash       pkix.AlgorithmIdentifier `asn1:"optional,explicit,tag:0"`
		MGF        pkix.AlgorithmIdentifier `asn1:"optional,explicit,tag:1"`
		SaltLength int                      `asn1:"optional,explicit,tag:2,default:20"`
	}
	var p params
	if d.hash != crypto.SHA1 {
		hashID := pkix.AlgorithmIdentifier{Algorithm: d.oid, Parameters: asn1.NullRawValue}
		mgfParams, err := asn1.Marshal(hashID)
		if err != nil {
			return nil, err
		}
		p.Hash = hashID
		p.MGF = pkix.AlgorithmIdentifier{Algorithm: oidMGF1, Parameters: asn1.RawValue{FullBytes: mgfParams}}
	}
	p.SaltLength = d.hash.Size()
	return asn1.Marshal(p)
}

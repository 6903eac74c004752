package wssec

import (
	"crypto/x509"
	"strings"
	"time"

	"github.com/beevik/etree"
)

// Coverage names the parts of a message a signature must cover.
type Coverage uint8

const (
	// RequireMessaging: the eb:Messaging header block.
	RequireMessaging Coverage = 1 << iota
	// RequireBody: the SOAP Body.
	RequireBody
	// RequireAttachments: every attachment passed to Verify.
	RequireAttachments
	// RequireAll is the AS4 requirement, and the meaning of a zero Coverage.
	RequireAll = RequireMessaging | RequireBody | RequireAttachments
)

// DefaultClockSkew is the timestamp tolerance when VerifyOptions.ClockSkew is
// zero.
const DefaultClockSkew = 5 * time.Minute

// VerifyOptions configure Verify. The zero value requires full AS4 coverage,
// trusts nobody, and uses the defaults documented on each field.
type VerifyOptions struct {
	// Trusted are the partner's configured signing certificates (two or more
	// during a rollover). The signer must be one of them.
	Trusted []*x509.Certificate
	// Require lists what must be signed; zero means RequireAll.
	Require Coverage
	// RequireTimestamp demands a signed wsu:Timestamp.
	RequireTimestamp bool
	// Now is the clock for the timestamp check (default time.Now).
	Now func() time.Time
	// ClockSkew is the tolerance of the timestamp check (default
	// DefaultClockSkew).
	ClockSkew time.Duration
	// MaxReferences bounds the ds:Reference count (default
	// DefaultMaxReferences).
	MaxReferences int
	// AllowSHA1 admits rsa-sha1 and sha1 digests.
	AllowSHA1 bool
	// MinRSABits is the smallest accepted RSA modulus (default 2048).
	MinRSABits int
	// AttachmentLimits bound the parsing of XML attachment content that the
	// SwA transforms canonicalise.
	AttachmentLimits Limits
	// CheckSigner, when set, turns on CA trust: the signer may also be a
	// certificate of a wsse:BinarySecurityToken of the header (X509v3, or
	// X509PKIPathv1), and once the signature, the references and the
	// coverage verified, CheckSigner decides whether it is trusted; its
	// refusal is a *TrustError (EBMS:0101).
	CheckSigner func(SignerInfo) error
}

func (o VerifyOptions) withDefaults() VerifyOptions {
	if o.Require == 0 {
		o.Require = RequireAll
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ClockSkew == 0 {
		o.ClockSkew = DefaultClockSkew
	}
	if o.MaxReferences <= 0 {
		o.MaxReferences = DefaultMaxReferences
	}
	if o.MinRSABits <= 0 {
		o.MinRSABits = 2048
	}
	o.AttachmentLimits = o.AttachmentLimits.withDefaults()
	return o
}

// Timestamp is a verified wsu:Timestamp; zero times were absent.
type Timestamp struct {
	Created, Expires time.Time
	// Signed reports that a verified ds:Reference digested the
	// wsu:Timestamp: only then do its times say when the sender signed.
	Signed bool
}

// Result is what a successful Verify established.
type Result struct {
	// Signer is the trusted certificate whose key verified the signature.
	Signer *x509.Certificate
	// SignatureMethod is the ds:SignatureMethod algorithm URI.
	SignatureMethod string
	// References are all ds:References of the SignedInfo, in order, each
	// verified; they are the material of the receipt's
	// NonRepudiationInformation.
	References []Reference
	// Messaging and Body are the exact elements that were digested (nil if
	// not required and not covered). Process these, never a fresh search of
	// the document.
	Messaging *etree.Element
	Body      *etree.Element
	// Timestamp is the wsu:Timestamp, if present.
	Timestamp *Timestamp
	// TokenType is the ValueType (ValueTypeX509v3 or ValueTypeX509PKIPathv1)
	// of the wsse:BinarySecurityToken the signer's key came from; empty when
	// ds:KeyInfo named the key otherwise (KeyIdentifier, X509Data).
	TokenType string
}

// Verify checks the WS-Security signature of an AS4 message: the signer is
// one of opts.Trusted, the SignedInfo signature value is valid, every
// reference digest matches, the elements and attachments opts.Require names
// are covered, and the wsu:Timestamp (if any) is within the clock skew.
// atts are the message's attachments, decrypted but not decompressed.
//
// Errors wrap ErrFailedAuthentication, ErrPolicyNoncompliance or
// ErrInvalidXML; Code maps them to EBMS codes.
func Verify(doc *etree.Document, atts []Attachment, opts VerifyOptions) (*Result, error) {
	opts = opts.withDefaults()
	sig, err := ParseSignature(doc, opts)
	if err != nil {
		return nil, err
	}
	ts, tsEl, err := sig.timestamp(opts)
	if err != nil {
		return nil, err
	}
	trusted := opts.Trusted
	var presented []*x509.Certificate
	if opts.CheckSigner != nil {
		presented = sig.presented()
		trusted = append(append([]*x509.Certificate{}, trusted...), presented...)
	}
	signer, err := sig.ResolveSigner(trusted)
	if err != nil {
		return nil, err
	}
	if err := sig.VerifySignedInfo(signer); err != nil {
		return nil, err
	}
	digested := map[*etree.Element]bool{}
	signedCIDs := map[string]bool{}
	for i, r := range sig.References {
		el, err := sig.VerifyReference(i, atts)
		if err != nil {
			return nil, err
		}
		if el != nil {
			digested[el] = true
		} else {
			// VerifyReference resolved the same Content-ID.
			id, err := cidContentID(r.URI)
			if err != nil {
				return nil, err
			}
			signedCIDs[id] = true
		}
	}
	res := &Result{
		Signer:          signer,
		SignatureMethod: sig.SignatureMethod,
		References:      sig.References,
		Timestamp:       ts,
		TokenType:       sig.tokenType,
	}
	if ts != nil && tsEl != nil {
		ts.Signed = digested[tsEl]
	}
	messaging, err := sig.env.messaging()
	if err != nil {
		return nil, err
	}
	if messaging != nil && digested[messaging] {
		res.Messaging = messaging
	}
	if digested[sig.env.body] {
		res.Body = sig.env.body
	}
	if opts.Require&RequireMessaging != 0 {
		if messaging == nil {
			return nil, policyErr("no eb:Messaging header")
		}
		if res.Messaging == nil {
			return nil, policyErr("eb:Messaging is not covered by the signature")
		}
	}
	if opts.Require&RequireBody != 0 && res.Body == nil {
		return nil, policyErr("soap:Body is not covered by the signature")
	}
	if opts.Require&RequireAttachments != 0 {
		for _, a := range atts {
			if !attachmentSigned(a, signedCIDs) {
				return nil, policyErr("attachment %q is not covered by the signature", a.ContentID)
			}
		}
	}
	if opts.RequireTimestamp {
		if tsEl == nil {
			return nil, policyErr("no wsu:Timestamp")
		}
		if !digested[tsEl] {
			return nil, policyErr("wsu:Timestamp is not covered by the signature")
		}
	}
	if opts.CheckSigner != nil {
		if err := sig.checkSigner(opts, signer, presented); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// attachmentSigned reports whether a is the attachment one of the verified
// references named; signedCIDs holds their Content-IDs as cidContentID
// decoded them.
func attachmentSigned(a Attachment, signedCIDs map[string]bool) bool {
	return signedCIDs[normalizeContentID(a.ContentID)]
}

// timestamp checks the wsu:Timestamp of the security header, if any.
func (s *Signature) timestamp(opts VerifyOptions) (*Timestamp, *etree.Element, error) {
	tss := childElements(s.Security, NamespaceWSU, "Timestamp")
	switch len(tss) {
	case 0:
		return nil, nil, nil
	case 1:
	default:
		return nil, nil, policyErr("%d wsu:Timestamp elements", len(tss))
	}
	el := tss[0]
	var ts Timestamp
	for _, f := range []struct {
		name string
		dst  *time.Time
	}{{"Created", &ts.Created}, {"Expires", &ts.Expires}} {
		c, err := childElement(el, NamespaceWSU, f.name)
		if err != nil {
			return nil, nil, err
		}
		if c == nil {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(c.Text()))
		if err != nil {
			return nil, nil, authErrCause(err, "wsu:%s %q is not an xsd:dateTime", f.name, c.Text())
		}
		*f.dst = t
	}
	now := opts.Now()
	if !ts.Created.IsZero() && ts.Created.After(now.Add(opts.ClockSkew)) {
		return nil, nil, authErr("wsu:Timestamp created %s, in the future (now %s, skew %s)", ts.Created.Format(time.RFC3339), now.Format(time.RFC3339), opts.ClockSkew)
	}
	if !ts.Expires.IsZero() && ts.Expires.Before(now.Add(-opts.ClockSkew)) {
		return nil, nil, authErr("wsu:Timestamp expired %s (now %s, skew %s)", ts.Expires.Format(time.RFC3339), now.Format(time.RFC3339), opts.ClockSkew)
	}
	if !ts.Created.IsZero() && !ts.Expires.IsZero() && ts.Expires.Before(ts.Created) {
		return nil, nil, authErr("wsu:Timestamp expires before it was created")
	}
	return &ts, el, nil
}

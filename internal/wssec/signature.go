package wssec

import (
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/beevik/etree"
)

// DefaultMaxReferences is the reference count limit when
// VerifyOptions.MaxReferences is zero.
const DefaultMaxReferences = 32

// maxTransforms bounds the transforms of one reference.
const maxTransforms = 4

// Transform is one ds:Transform of a reference.
type Transform struct {
	Algorithm string
	// PrefixList is the ec:InclusiveNamespaces PrefixList of an exclusive
	// c14n transform ("" if none).
	PrefixList string
}

// Reference is one ds:Reference of the SignedInfo, as it appears in the
// message (the material of an ebbp:MessagePartNRInformation).
type Reference struct {
	URI          string
	DigestMethod string
	// DigestValue is the base64 text of ds:DigestValue, trimmed of
	// surrounding whitespace.
	DigestValue string
	Transforms  []Transform
	// Element is the ds:Reference element in the message, for callers that
	// copy it verbatim into a receipt.
	Element *etree.Element

	digest []byte
}

// Signature is the parsed ds:Signature of the wsse:Security header of an
// envelope. Verify uses it; its methods let a caller verify the parts
// separately (for example the SignedInfo and the XML references of a message
// whose attachments it cannot decrypt).
type Signature struct {
	// Element is the ds:Signature element; Security the wsse:Security header
	// holding it; SignedInfo its ds:SignedInfo.
	Element    *etree.Element
	Security   *etree.Element
	SignedInfo *etree.Element
	// CanonicalizationMethod and its InclusiveNamespaces PrefixList.
	CanonicalizationMethod string
	PrefixList             string
	SignatureMethod        string
	References             []Reference

	env        *soapEnvelope
	tokenType  string // ValueType of the BinarySecurityToken the signer came from
	ids        idIndex
	value      []byte
	sigAlg     signatureAlgorithm
	c14n       c14nMethod
	allowSHA1  bool
	minRSABits int
	limits     Limits
}

// ParseSignature locates the wsse:Security header addressed to us in doc,
// its single ds:Signature, and parses the SignedInfo. It indexes the ids of
// the whole document (rejecting duplicates) and checks the algorithms and the
// reference count against opts. It does not verify anything cryptographic.
func ParseSignature(doc *etree.Document, opts VerifyOptions) (*Signature, error) {
	opts = opts.withDefaults()
	env, err := locateEnvelope(doc)
	if err != nil {
		return nil, err
	}
	secs := env.securityHeaders()
	switch len(secs) {
	case 0:
		return nil, policyErr("no wsse:Security header")
	case 1:
	default:
		return nil, policyErr("%d wsse:Security headers for the ultimate receiver", len(secs))
	}
	sec := secs[0]
	sigs := childElements(sec, NamespaceDSig, "Signature")
	switch len(sigs) {
	case 0:
		return nil, policyErr("no ds:Signature in wsse:Security")
	case 1:
	default:
		return nil, policyErr("%d ds:Signature elements in wsse:Security", len(sigs))
	}
	ids, err := buildIDIndex(env.root)
	if err != nil {
		return nil, err
	}
	s := &Signature{
		Element:    sigs[0],
		Security:   sec,
		env:        env,
		ids:        ids,
		allowSHA1:  opts.AllowSHA1,
		minRSABits: opts.MinRSABits,
		limits:     opts.AttachmentLimits,
	}
	if err := s.parseSignedInfo(opts.MaxReferences); err != nil {
		return nil, err
	}
	sv, err := childElement(s.Element, NamespaceDSig, "SignatureValue")
	if err != nil {
		return nil, err
	}
	if sv == nil {
		return nil, policyErr("no ds:SignatureValue")
	}
	if s.value, err = decodeBase64(sv.Text()); err != nil {
		return nil, authErrCause(err, "ds:SignatureValue is not base64")
	}
	return s, nil
}

func (s *Signature) parseSignedInfo(maxRefs int) error {
	si, err := childElement(s.Element, NamespaceDSig, "SignedInfo")
	if err != nil {
		return err
	}
	if si == nil {
		return policyErr("no ds:SignedInfo")
	}
	s.SignedInfo = si
	if err := checkSignedInfoChildren(si); err != nil {
		return err
	}
	cm, err := childElement(si, NamespaceDSig, "CanonicalizationMethod")
	if err != nil {
		return err
	}
	if cm == nil {
		return policyErr("no ds:CanonicalizationMethod")
	}
	s.CanonicalizationMethod, _ = attrValue(cm, "", "Algorithm")
	var ok bool
	if s.c14n, ok = c14nMethodFor(s.CanonicalizationMethod); !ok {
		return policyErr("canonicalization method %q not supported", s.CanonicalizationMethod)
	}
	if s.PrefixList, err = inclusivePrefixes(cm, s.c14n); err != nil {
		return err
	}
	sm, err := childElement(si, NamespaceDSig, "SignatureMethod")
	if err != nil {
		return err
	}
	if sm == nil {
		return policyErr("no ds:SignatureMethod")
	}
	s.SignatureMethod, _ = attrValue(sm, "", "Algorithm")
	if s.sigAlg, err = lookupSignatureAlgorithm(s.SignatureMethod, s.allowSHA1); err != nil {
		return err
	}
	refs := childElements(si, NamespaceDSig, "Reference")
	if len(refs) == 0 {
		return policyErr("SignedInfo has no ds:Reference")
	}
	if len(refs) > maxRefs {
		return policyErr("%d references, at most %d allowed", len(refs), maxRefs)
	}
	for _, re := range refs {
		r, err := s.parseReference(re)
		if err != nil {
			return err
		}
		s.References = append(s.References, r)
	}
	return nil
}

// checkSignedInfoChildren admits only the children XML-DSig §4.4 gives
// ds:SignedInfo: ds:CanonicalizationMethod, ds:SignatureMethod and
// ds:Reference. Anything else would be canonicalised (and its namespace
// declarations processed) before the signature is authenticated.
func checkSignedInfoChildren(si *etree.Element) error {
	for _, c := range si.ChildElements() {
		if elementNS(c) == NamespaceDSig {
			switch c.Tag {
			case "CanonicalizationMethod", "SignatureMethod", "Reference":
				continue
			}
		}
		return policyErr("unexpected <%s> in ds:SignedInfo", qname(c.Space, c.Tag))
	}
	return nil
}

// maxInclusivePrefixes bounds an InclusiveNamespaces PrefixList: every
// prefix is looked at for every canonicalised element.
const maxInclusivePrefixes = 64

// inclusivePrefixes returns the PrefixList of the ec:InclusiveNamespaces
// child of a CanonicalizationMethod/Transform element.
func inclusivePrefixes(el *etree.Element, m c14nMethod) (string, error) {
	in, err := childElement(el, NamespaceExcC14N, "InclusiveNamespaces")
	if err != nil || in == nil {
		return "", err
	}
	if !m.exclusive {
		return "", policyErr("InclusiveNamespaces with an inclusive canonicalization method")
	}
	pl, _ := attrValue(in, "", "PrefixList")
	prefixes := strings.Fields(pl)
	if len(prefixes) > maxInclusivePrefixes {
		return "", policyErr("InclusiveNamespaces PrefixList has %d prefixes, at most %d allowed", len(prefixes), maxInclusivePrefixes)
	}
	return strings.Join(prefixes, " "), nil
}

func (s *Signature) parseReference(re *etree.Element) (Reference, error) {
	r := Reference{Element: re}
	r.URI, _ = attrValue(re, "", "URI")
	if tf, err := childElement(re, NamespaceDSig, "Transforms"); err != nil {
		return r, err
	} else if tf != nil {
		ts := childElements(tf, NamespaceDSig, "Transform")
		if len(ts) > maxTransforms {
			return r, policyErr("reference %q has %d transforms, at most %d allowed", r.URI, len(ts), maxTransforms)
		}
		for _, t := range ts {
			alg, _ := attrValue(t, "", "Algorithm")
			tr := Transform{Algorithm: alg}
			if m, ok := c14nMethodFor(alg); ok {
				pl, err := inclusivePrefixes(t, m)
				if err != nil {
					return r, err
				}
				tr.PrefixList = pl
			}
			r.Transforms = append(r.Transforms, tr)
		}
	}
	dm, err := childElement(re, NamespaceDSig, "DigestMethod")
	if err != nil {
		return r, err
	}
	if dm == nil {
		return r, policyErr("reference %q has no ds:DigestMethod", r.URI)
	}
	r.DigestMethod, _ = attrValue(dm, "", "Algorithm")
	if _, err := lookupDigest(r.DigestMethod, s.allowSHA1); err != nil {
		return r, err
	}
	dv, err := childElement(re, NamespaceDSig, "DigestValue")
	if err != nil {
		return r, err
	}
	if dv == nil {
		return r, policyErr("reference %q has no ds:DigestValue", r.URI)
	}
	r.DigestValue = strings.TrimSpace(dv.Text())
	if r.digest, err = decodeBase64(r.DigestValue); err != nil {
		return r, authErrCause(err, "reference %q: DigestValue is not base64", r.URI)
	}
	return r, nil
}

// VerifySignedInfo canonicalises the SignedInfo with its own
// CanonicalizationMethod and PrefixList and checks the SignatureValue with
// the public key of cert. It does not check cert against any trust list;
// ResolveSigner does.
func (s *Signature) VerifySignedInfo(cert *x509.Certificate) error {
	if cert == nil {
		return authErr("no signer certificate")
	}
	signed, err := canonicalize(s.SignedInfo, s.c14n, s.PrefixList, nil)
	if err != nil {
		return authErrCause(err, "ds:SignedInfo could not be canonicalized")
	}
	return verifySignatureValue(s.sigAlg, cert.PublicKey, signed, s.value, s.minRSABits)
}

// VerifyReference resolves reference i, applies its transforms and compares
// the digest. For a same-document reference ("#id") it returns the element
// that was digested; for a "cid:" reference it returns nil after matching
// the attachment in atts.
func (s *Signature) VerifyReference(i int, atts []Attachment) (*etree.Element, error) {
	if i < 0 || i >= len(s.References) {
		return nil, policyErr("no reference %d", i)
	}
	r := s.References[i]
	h, err := lookupDigest(r.DigestMethod, s.allowSHA1)
	if err != nil {
		return nil, err
	}
	var octets []byte
	var target *etree.Element
	switch {
	case strings.HasPrefix(r.URI, "#") && len(r.URI) > 1:
		target = s.ids[r.URI[1:]]
		if target == nil {
			return nil, authErr("reference %q: no element with this id", r.URI)
		}
		if octets, err = s.elementOctets(r, target); err != nil {
			return nil, err
		}
	case strings.HasPrefix(strings.ToLower(r.URI), "cid:"):
		id, err := cidContentID(r.URI)
		if err != nil {
			return nil, err
		}
		att, err := findAttachment(atts, id)
		if err != nil {
			return nil, err
		}
		if len(r.Transforms) != 1 {
			return nil, policyErr("reference %q: attachment references need exactly one SwA transform, found %d", r.URI, len(r.Transforms))
		}
		var complete bool
		switch r.Transforms[0].Algorithm {
		case AlgAttachmentContentSignature:
		case AlgAttachmentCompleteSignature:
			complete = true
		default:
			return nil, policyErr("reference %q: transform %q not supported for attachments", r.URI, r.Transforms[0].Algorithm)
		}
		sum, ok := att.Digests[DigestKey{r.Transforms[0].Algorithm, r.DigestMethod}]
		if !ok {
			d := h.New()
			if err := writeAttachmentOctets(d, att, complete, s.limits); err != nil {
				if errors.Is(err, errReadAttachment) {
					return nil, err // our spool, not the message
				}
				return nil, authErrCause(err, "reference %q could not be digested", r.URI)
			}
			sum = d.Sum(nil)
		} else if sum == nil {
			// Computed ahead, and the content could not be digested.
			return nil, authErr("reference %q could not be digested", r.URI)
		}
		if !equalBytes(sum, r.digest) {
			return nil, authErr("reference %q: digest mismatch", r.URI)
		}
		return nil, nil
	default:
		return nil, policyErr("reference URI %q not supported (want #id or cid:)", r.URI)
	}
	if !equalBytes(digest(h, octets), r.digest) {
		return nil, authErr("reference %q: digest mismatch", r.URI)
	}
	return target, nil
}

// elementOctets applies the transforms of a same-document reference: any
// number of enveloped-signature transforms followed by at most one
// canonicalization (inclusive C14N 1.0 when none is given, as XML-DSig
// requires for a node-set).
func (s *Signature) elementOctets(r Reference, target *etree.Element) ([]byte, error) {
	var skip *etree.Element
	m := c14nMethod{}
	prefixList := ""
	for i, t := range r.Transforms {
		if t.Algorithm == AlgEnvelopedSignature {
			skip = s.Element
			continue
		}
		cm, ok := c14nMethodFor(t.Algorithm)
		if !ok {
			return nil, policyErr("reference %q: transform %q not supported", r.URI, t.Algorithm)
		}
		if i != len(r.Transforms)-1 {
			return nil, policyErr("reference %q: canonicalization must be the last transform", r.URI)
		}
		// Comments are never part of a same-document bare-name reference.
		cm.comments = false
		m, prefixList = cm, t.PrefixList
	}
	out, err := canonicalize(target, m, prefixList, skip)
	if err != nil {
		return nil, authErrCause(err, "reference %q could not be digested", r.URI)
	}
	return out, nil
}

// cidContentID returns the Content-ID (without angle brackets) that a cid:
// URL names. RFC 2392 %-encodes the Content-ID in the URL, so the URL is
// unescaped exactly once; the digest check and the coverage check both use
// this, so they always agree on which attachment a reference covers.
func cidContentID(uri string) (string, error) {
	if len(uri) < 4 || !strings.EqualFold(uri[:4], "cid:") {
		return "", policyErr("reference URI %q is not a cid: URL", uri)
	}
	id, err := url.PathUnescape(uri[4:])
	if err != nil {
		return "", authErrCause(err, "reference %q: invalid %%-encoding", uri)
	}
	return id, nil
}

// cidURL is the inverse of cidContentID: the cid: URL of a Content-ID
// (without angle brackets), %-encoding '%' and every character a URL may
// not carry literally (RFC 2392, RFC 3986 pchar plus "/" and "?").
func cidURL(id string) string {
	var b strings.Builder
	b.WriteString("cid:")
	for i := 0; i < len(id); i++ {
		ch := id[i]
		switch {
		case 'a' <= ch && ch <= 'z', 'A' <= ch && ch <= 'Z', '0' <= ch && ch <= '9',
			strings.IndexByte("-._~!$&'()*+,;=:@/?", ch) >= 0:
			b.WriteByte(ch)
		default:
			fmt.Fprintf(&b, "%%%02X", ch)
		}
	}
	return b.String()
}

// findAttachment returns the one attachment whose Content-ID, without angle
// brackets, is id.
func findAttachment(atts []Attachment, id string) (Attachment, error) {
	var found []Attachment
	for _, a := range atts {
		if normalizeContentID(a.ContentID) == id {
			found = append(found, a)
		}
	}
	switch len(found) {
	case 0:
		return Attachment{}, authErr("reference %s: no such attachment", cidURL(id))
	case 1:
		return found[0], nil
	}
	return Attachment{}, policyErr("%d attachments with Content-ID %q", len(found), id)
}

// normalizeContentID strips whitespace and the angle brackets of a
// Content-ID header value.
func normalizeContentID(id string) string {
	id = strings.TrimSpace(id)
	if len(id) >= 2 && id[0] == '<' && id[len(id)-1] == '>' {
		id = id[1 : len(id)-1]
	}
	return id
}

func decodeBase64(s string) ([]byte, error) {
	s = strings.Map(func(r rune) rune {
		switch r {
		case ' ', '\t', '\r', '\n':
			return -1
		}
		return r
	}, s)
	return base64.StdEncoding.DecodeString(s)
}

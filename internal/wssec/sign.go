package wssec

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/beevik/etree"
)

// SignOptions configure Sign.
type SignOptions struct {
	// Signer is the private key; Certificate its certificate, embedded as a
	// wsse:BinarySecurityToken.
	Signer      crypto.Signer
	Certificate *x509.Certificate
	// SignatureMethod defaults by key type: RSA → rsa-sha256, ECDSA P-256/
	// P-384/P-521 → ecdsa-sha256/384/512, Ed25519 → eddsa-ed25519.
	SignatureMethod string
	// DigestMethod defaults to SHA-256.
	DigestMethod string
	// TimestampTTL, if positive, adds a signed wsu:Timestamp whose Expires is
	// Created + TimestampTTL.
	TimestampTTL time.Duration
	// Now is the clock for the timestamp (default time.Now).
	Now func() time.Time
	// Rand is the source for ids and signing (default crypto/rand).
	Rand io.Reader
	// PKIPath writes the BinarySecurityToken as X509PKIPathv1: the issuers in
	// Chain (closest issuer first) followed by Certificate, as the BDEW AS4
	// profile asks. Otherwise the token is X509v3 (Certificate alone).
	PKIPath bool
	Chain   []*x509.Certificate
}

// Sign adds a wsse:Security header (mustUnderstand) to the envelope in doc
// with a BinarySecurityToken, an optional wsu:Timestamp and a ds:Signature
// (exclusive c14n, SHA-256 digests by default) over the eb:Messaging header,
// the SOAP Body (both given a wsu:Id if they have none) and every attachment
// in atts (Attachment-Content-Signature-Transform). The attachment bodies
// must be the bytes that will be sent (compressed, not yet encrypted).
//
// The result verifies with Verify, also after serialisation with etree and
// re-parsing: Sign sets doc.WriteSettings so that attribute whitespace and
// carriage returns are written as character references.
func Sign(doc *etree.Document, atts []Attachment, opts SignOptions) error {
	sigAlg, digestHash, err := completeSignOptions(&opts)
	if err != nil {
		return err
	}
	env, messaging, err := locateSignedHeaders(doc)
	if err != nil {
		return err
	}
	newID, err := idAllocator(env, opts.Rand)
	if err != nil {
		return err
	}
	messagingID, err := ensureWSUID(messaging, "id-", newID)
	if err != nil {
		return err
	}
	bodyID, err := ensureWSUID(env.body, "id-", newID)
	if err != nil {
		return err
	}
	// The header, inserted first so that canonicalisation sees the final
	// namespace context.
	sec := insertSecurityHeader(env)
	var parts []signedPart
	if opts.TimestampTTL > 0 {
		ts, err := addTimestamp(sec, opts, newID)
		if err != nil {
			return err
		}
		parts = append(parts, ts)
	}
	bstID, tokenType, err := addSecurityToken(sec, opts, newID)
	if err != nil {
		return err
	}
	content, err := signedContent(messaging, messagingID, env.body, bodyID, atts, digestHash)
	if err != nil {
		return err
	}
	parts = append(parts, content...)
	if err := addSignature(sec, parts, opts, sigAlg, digestHash, newID, bstID, tokenType); err != nil {
		return err
	}
	// Serialise tabs, line ends and carriage returns in attribute values and
	// carriage returns in text as character references: written literally,
	// the receiver's parser would normalise them and the digests would break.
	doc.WriteSettings.CanonicalAttrVal = true
	doc.WriteSettings.CanonicalText = true
	doc.WriteSettings.AttrSingleQuote = false
	return nil
}

// signedPart is one reference of the signature: an element by its wsu:Id
// (its canonical octets) or an attachment by its cid: URL (its digest).
type signedPart struct {
	uri       string
	transform string
	octets    []byte
	sum       []byte // the digest, when there are no octets (attachments are digested as streams)
}

// completeSignOptions checks the signer and fills in the defaults of opts;
// it returns the signature and digest algorithms.
func completeSignOptions(opts *SignOptions) (signatureAlgorithm, crypto.Hash, error) {
	if opts.Signer == nil || opts.Certificate == nil {
		return signatureAlgorithm{}, 0, errors.New("wssec: sign: signer and certificate are required")
	}
	pub, ok := opts.Signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(opts.Certificate.PublicKey) {
		return signatureAlgorithm{}, 0, errors.New("wssec: sign: the certificate does not belong to the signing key")
	}
	if opts.SignatureMethod == "" {
		m, err := defaultSignatureMethod(opts.Signer.Public())
		if err != nil {
			return signatureAlgorithm{}, 0, err
		}
		opts.SignatureMethod = m
	}
	sigAlg, err := lookupSignatureAlgorithm(opts.SignatureMethod, true)
	if err != nil {
		return signatureAlgorithm{}, 0, fmt.Errorf("wssec: sign: %w", err)
	}
	if opts.DigestMethod == "" {
		opts.DigestMethod = AlgSHA256
	}
	digestHash, err := lookupDigest(opts.DigestMethod, true)
	if err != nil {
		return signatureAlgorithm{}, 0, fmt.Errorf("wssec: sign: %w", err)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Rand == nil {
		opts.Rand = rand.Reader
	}
	return sigAlg, digestHash, nil
}

// locateSignedHeaders finds the SOAP envelope of doc, without a
// wsse:Security header yet, and its eb:Messaging header.
func locateSignedHeaders(doc *etree.Document) (*soapEnvelope, *etree.Element, error) {
	env, err := locateEnvelope(doc)
	if err != nil {
		return nil, nil, fmt.Errorf("wssec: sign: %w", err)
	}
	if len(env.securityHeaders()) > 0 {
		return nil, nil, errors.New("wssec: sign: the envelope already has a wsse:Security header")
	}
	if env.header == nil {
		return nil, nil, errors.New("wssec: sign: the envelope has no SOAP Header")
	}
	messaging, err := env.messaging()
	if err != nil {
		return nil, nil, fmt.Errorf("wssec: sign: %w", err)
	}
	if messaging == nil {
		return nil, nil, errors.New("wssec: sign: the envelope has no eb:Messaging header")
	}
	return env, messaging, nil
}

// idAllocator returns a function that makes random wsu:Ids (prefix and
// 32 hex digits) used nowhere else in env.
func idAllocator(env *soapEnvelope, rnd io.Reader) (func(prefix string) (string, error), error) {
	ids, err := buildIDIndex(env.root)
	if err != nil {
		return nil, fmt.Errorf("wssec: sign: %w", err)
	}
	return func(prefix string) (string, error) {
		for {
			var b [16]byte
			if _, err := io.ReadFull(rnd, b[:]); err != nil {
				return "", fmt.Errorf("wssec: sign: random id: %w", err)
			}
			id := prefix + hex.EncodeToString(b[:])
			if ids[id] == nil {
				ids[id] = env.root // reserve
				return id, nil
			}
		}
	}, nil
}

// insertSecurityHeader inserts an empty wsse:Security header, marked
// mustUnderstand, as the first child of the SOAP Header.
func insertSecurityHeader(env *soapEnvelope) *etree.Element {
	sec := etree.NewElement("wsse:Security")
	sec.CreateAttr("xmlns:wsse", NamespaceWSSE)
	sec.CreateAttr("xmlns:wsu", NamespaceWSU)
	soapPrefix, declare := prefixFor(env.header, env.ns, "S12")
	if env.ns == NamespaceSOAP11 && declare {
		soapPrefix, _ = prefixFor(env.header, env.ns, "S11")
	}
	if declare {
		sec.CreateAttr("xmlns:"+soapPrefix, env.ns)
	}
	if env.ns == NamespaceSOAP12 {
		sec.CreateAttr(soapPrefix+":mustUnderstand", "true")
	} else {
		sec.CreateAttr(soapPrefix+":mustUnderstand", "1")
	}
	env.header.InsertChildAt(0, sec)
	return sec
}

// addTimestamp adds a wsu:Timestamp to sec (Created now, Expires after
// opts.TimestampTTL) and returns its signed part.
func addTimestamp(sec *etree.Element, opts SignOptions, newID func(string) (string, error)) (signedPart, error) {
	tsID, err := newID("TS-")
	if err != nil {
		return signedPart{}, err
	}
	now := opts.Now().UTC()
	ts := sec.CreateElement("wsu:Timestamp")
	ts.CreateAttr("wsu:Id", tsID)
	ts.CreateElement("wsu:Created").SetText(now.Format("2006-01-02T15:04:05.000Z"))
	ts.CreateElement("wsu:Expires").SetText(now.Add(opts.TimestampTTL).Format("2006-01-02T15:04:05.000Z"))
	c, err := canonicalize(ts, c14nMethod{exclusive: true}, "", nil)
	if err != nil {
		return signedPart{}, fmt.Errorf("wssec: sign: timestamp: %w", err)
	}
	return signedPart{"#" + tsID, AlgExcC14N, c, nil}, nil
}

// addSecurityToken adds our certificate to sec as a
// wsse:BinarySecurityToken (X509v3, or X509PKIPathv1 with opts.PKIPath)
// and returns its wsu:Id and ValueType.
func addSecurityToken(sec *etree.Element, opts SignOptions, newID func(string) (string, error)) (bstID, tokenType string, err error) {
	bstID, err = newID("X509-")
	if err != nil {
		return "", "", err
	}
	bst := sec.CreateElement("wsse:BinarySecurityToken")
	bst.CreateAttr("EncodingType", EncodingBase64Binary)
	tokenType, token := ValueTypeX509v3, opts.Certificate.Raw
	if opts.PKIPath {
		tokenType = ValueTypeX509PKIPathv1
		if token, err = pkiPath(opts.Certificate, opts.Chain); err != nil {
			return "", "", fmt.Errorf("wssec: sign: %w", err)
		}
	}
	bst.CreateAttr("ValueType", tokenType)
	bst.CreateAttr("wsu:Id", bstID)
	bst.SetText(base64.StdEncoding.EncodeToString(token))
	return bstID, tokenType, nil
}

// signedContent canonicalises the eb:Messaging header and the SOAP Body
// and digests every attachment (Attachment-Content-Signature-Transform).
func signedContent(messaging *etree.Element, messagingID string, body *etree.Element, bodyID string, atts []Attachment, digestHash crypto.Hash) ([]signedPart, error) {
	var parts []signedPart
	for _, p := range []struct {
		el *etree.Element
		id string
	}{{messaging, messagingID}, {body, bodyID}} {
		c, err := canonicalize(p.el, c14nMethod{exclusive: true}, "", nil)
		if err != nil {
			return nil, fmt.Errorf("wssec: sign: %s: %w", p.el.Tag, err)
		}
		parts = append(parts, signedPart{"#" + p.id, AlgExcC14N, c, nil})
	}
	for _, a := range atts {
		cid := normalizeContentID(a.ContentID)
		if cid == "" {
			return nil, errors.New("wssec: sign: attachment without Content-ID")
		}
		d := digestHash.New()
		if err := writeAttachmentOctets(d, a, false, Limits{}); err != nil {
			return nil, fmt.Errorf("wssec: sign: attachment %s: %w", cid, err)
		}
		parts = append(parts, signedPart{cidURL(cid), AlgAttachmentContentSignature, nil, d.Sum(nil)})
	}
	return parts, nil
}

// addSignature adds the ds:Signature over parts to sec: SignedInfo with a
// reference per part, its signature value, and a KeyInfo pointing to the
// BinarySecurityToken.
func addSignature(sec *etree.Element, parts []signedPart, opts SignOptions, sigAlg signatureAlgorithm, digestHash crypto.Hash, newID func(string) (string, error), bstID, tokenType string) error {
	sigID, err := newID("SIG-")
	if err != nil {
		return err
	}
	sig := sec.CreateElement("ds:Signature")
	sig.CreateAttr("xmlns:ds", NamespaceDSig)
	sig.CreateAttr("Id", sigID)
	si := sig.CreateElement("ds:SignedInfo")
	si.CreateElement("ds:CanonicalizationMethod").CreateAttr("Algorithm", AlgExcC14N)
	si.CreateElement("ds:SignatureMethod").CreateAttr("Algorithm", opts.SignatureMethod)
	for _, p := range parts {
		ref := si.CreateElement("ds:Reference")
		ref.CreateAttr("URI", p.uri)
		ref.CreateElement("ds:Transforms").CreateElement("ds:Transform").CreateAttr("Algorithm", p.transform)
		ref.CreateElement("ds:DigestMethod").CreateAttr("Algorithm", opts.DigestMethod)
		sum := p.sum
		if sum == nil {
			sum = digest(digestHash, p.octets)
		}
		ref.CreateElement("ds:DigestValue").SetText(base64.StdEncoding.EncodeToString(sum))
	}
	signed, err := canonicalize(si, c14nMethod{exclusive: true}, "", nil)
	if err != nil {
		return fmt.Errorf("wssec: sign: SignedInfo: %w", err)
	}
	value, err := signValue(opts.Signer, sigAlg, opts.Rand, signed)
	if err != nil {
		return fmt.Errorf("wssec: sign: %w", err)
	}
	sig.CreateElement("ds:SignatureValue").SetText(base64.StdEncoding.EncodeToString(value))
	str := sig.CreateElement("ds:KeyInfo").CreateElement("wsse:SecurityTokenReference")
	r := str.CreateElement("wsse:Reference")
	r.CreateAttr("URI", "#"+bstID)
	r.CreateAttr("ValueType", tokenType)
	return nil
}

// ensureWSUID returns the wsu:Id of el, adding one (and the wsu namespace
// declaration if needed) when it has none.
func ensureWSUID(el *etree.Element, prefix string, newID func(string) (string, error)) (string, error) {
	if id, ok := attrValue(el, NamespaceWSU, "Id"); ok && id != "" {
		return id, nil
	}
	id, err := newID(prefix)
	if err != nil {
		return "", err
	}
	p, declare := prefixFor(el, NamespaceWSU, "wsu")
	if declare {
		el.CreateAttr("xmlns:"+p, NamespaceWSU)
	}
	el.CreateAttr(p+":Id", id)
	return id, nil
}

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
	if opts.Signer == nil || opts.Certificate == nil {
		return errors.New("wssec: sign: signer and certificate are required")
	}
	pub, ok := opts.Signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(opts.Certificate.PublicKey) {
		return errors.New("wssec: sign: the certificate does not belong to the signing key")
	}
	if opts.SignatureMethod == "" {
		m, err := defaultSignatureMethod(opts.Signer.Public())
		if err != nil {
			return err
		}
		opts.SignatureMethod = m
	}
	sigAlg, err := lookupSignatureAlgorithm(opts.SignatureMethod, true)
	if err != nil {
		return fmt.Errorf("wssec: sign: %w", err)
	}
	if opts.DigestMethod == "" {
		opts.DigestMethod = AlgSHA256
	}
	digestHash, err := lookupDigest(opts.DigestMethod, true)
	if err != nil {
		return fmt.Errorf("wssec: sign: %w", err)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Rand == nil {
		opts.Rand = rand.Reader
	}

	env, err := locateEnvelope(doc)
	if err != nil {
		return fmt.Errorf("wssec: sign: %w", err)
	}
	if len(env.securityHeaders()) > 0 {
		return errors.New("wssec: sign: the envelope already has a wsse:Security header")
	}
	if env.header == nil {
		return errors.New("wssec: sign: the envelope has no SOAP Header")
	}
	messaging, err := env.messaging()
	if err != nil {
		return fmt.Errorf("wssec: sign: %w", err)
	}
	if messaging == nil {
		return errors.New("wssec: sign: the envelope has no eb:Messaging header")
	}
	ids, err := buildIDIndex(env.root)
	if err != nil {
		return fmt.Errorf("wssec: sign: %w", err)
	}
	newID := func(prefix string) (string, error) {
		for {
			var b [16]byte
			if _, err := io.ReadFull(opts.Rand, b[:]); err != nil {
				return "", fmt.Errorf("wssec: sign: random id: %w", err)
			}
			id := prefix + hex.EncodeToString(b[:])
			if ids[id] == nil {
				ids[id] = env.root // reserve
				return id, nil
			}
		}
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

	type signedPart struct {
		uri       string
		transform string
		octets    []byte
		sum       []byte // the digest, when there are no octets (attachments are digested as streams)
	}
	var parts []signedPart

	if opts.TimestampTTL > 0 {
		tsID, err := newID("TS-")
		if err != nil {
			return err
		}
		now := opts.Now().UTC()
		ts := sec.CreateElement("wsu:Timestamp")
		ts.CreateAttr("wsu:Id", tsID)
		ts.CreateElement("wsu:Created").SetText(now.Format("2006-01-02T15:04:05.000Z"))
		ts.CreateElement("wsu:Expires").SetText(now.Add(opts.TimestampTTL).Format("2006-01-02T15:04:05.000Z"))
		c, err := canonicalize(ts, c14nMethod{exclusive: true}, "", nil)
		if err != nil {
			return fmt.Errorf("wssec: sign: timestamp: %w", err)
		}
		parts = append(parts, signedPart{"#" + tsID, AlgExcC14N, c, nil})
	}

	bstID, err := newID("X509-")
	if err != nil {
		return err
	}
	bst := sec.CreateElement("wsse:BinarySecurityToken")
	bst.CreateAttr("EncodingType", EncodingBase64Binary)
	tokenType, token := ValueTypeX509v3, opts.Certificate.Raw
	if opts.PKIPath {
		tokenType = ValueTypeX509PKIPathv1
		if token, err = pkiPath(opts.Certificate, opts.Chain); err != nil {
			return fmt.Errorf("wssec: sign: %w", err)
		}
	}
	bst.CreateAttr("ValueType", tokenType)
	bst.CreateAttr("wsu:Id", bstID)
	bst.SetText(base64.StdEncoding.EncodeToString(token))

	for _, p := range []struct {
		el *etree.Element
		id string
	}{{messaging, messagingID}, {env.body, bodyID}} {
		c, err := canonicalize(p.el, c14nMethod{exclusive: true}, "", nil)
		if err != nil {
			return fmt.Errorf("wssec: sign: %s: %w", p.el.Tag, err)
		}
		parts = append(parts, signedPart{"#" + p.id, AlgExcC14N, c, nil})
	}
	for _, a := range atts {
		cid := normalizeContentID(a.ContentID)
		if cid == "" {
			return errors.New("wssec: sign: attachment without Content-ID")
		}
		d := digestHash.New()
		if err := writeAttachmentOctets(d, a, false, Limits{}); err != nil {
			return fmt.Errorf("wssec: sign: attachment %s: %w", cid, err)
		}
		parts = append(parts, signedPart{cidURL(cid), AlgAttachmentContentSignature, nil, d.Sum(nil)})
	}

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

	// Serialise tabs, line ends and carriage returns in attribute values and
	// carriage returns in text as character references: written literally,
	// the receiver's parser would normalise them and the digests would break.
	doc.WriteSettings.CanonicalAttrVal = true
	doc.WriteSettings.CanonicalText = true
	doc.WriteSettings.AttrSingleQuote = false
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

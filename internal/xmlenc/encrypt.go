package xmlenc

import (
	"bytes"
	"crypto/aes"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/internal/brainpool"
	"github.com/edigateway/gateway/internal/gcmstream"
)

// KeyReference selects how the EncryptedKey names the recipient certificate.
type KeyReference int

const (
	// ByIssuerSerial writes wsse:SecurityTokenReference/ds:X509Data/ds:X509IssuerSerial.
	ByIssuerSerial KeyReference = iota
	// BySubjectKeyID writes a wsse:KeyIdentifier of ValueType X509SubjectKeyIdentifier.
	BySubjectKeyID
	// ByThumbprint writes a wsse:KeyIdentifier of ValueType ThumbprintSHA1.
	ByThumbprint
	// ByBinarySecurityToken adds the certificate as a wsse:BinarySecurityToken
	// to the Security header and references it with wsse:Reference.
	ByBinarySecurityToken
	// ByX509SKI writes ds:X509Data/ds:X509SKI (the BDEW AS4 profile's
	// RecipientKeyInfo).
	ByX509SKI
)

// Recipient is the partner we encrypt for. Cert carries an RSA public key
// (RSA-OAEP key transport), an X25519 public key (eDelivery AS4 2.0 key
// agreement) or a brainpoolP256r1 key (BDEW AS4: ECDH-ES + ConcatKDF
// SHA-256; parse such certificates with brainpool.ParseCertificate).
type Recipient struct {
	Cert      *x509.Certificate
	Reference KeyReference
}

// EncryptOptions selects the algorithms of Encrypt. The zero value gives
// rsa-oaep-mgf1p with a SHA-256 digest (RSA recipients) or X25519 + HKDF
// (HMAC-SHA256) + kw-aes128 (X25519 recipients), and AES-128-GCM content
// encryption of every attachment (Attachment-Content-Only).
type EncryptOptions struct {
	// KeyTransport is AlgRSAOAEPMGF1P (default) or AlgRSAOAEP; RSA only.
	KeyTransport string
	// DigestMethod is the OAEP digest URI (default AlgSHA256); RSA only.
	DigestMethod string
	// MGF is the MGF URI written with AlgRSAOAEP (default AlgMGF1SHA256).
	// AlgRSAOAEPMGF1P always uses MGF1-SHA1.
	MGF string
	// KeyWrap is the AES key wrap URI (default AlgKWAES128); X25519 only.
	KeyWrap string
	// HKDFInfo is the HKDF info, written as dsig-more:Info; X25519 only.
	// Empty omits the element.
	HKDFInfo []byte
	// Content is the content encryption URI: AlgAES128GCM (default),
	// AlgAES192GCM or AlgAES256GCM.
	Content string
	// EncryptBody also encrypts the content of the SOAP Body (Type Content)
	// in place.
	EncryptBody bool
	// Rand is the randomness source (default crypto/rand).
	Rand io.Reader
}

// Encrypt encrypts every attachment (SwA Attachment-Content-Only: IV ‖
// ciphertext ‖ tag replaces the body, Content-Type becomes
// application/octet-stream and the original type is kept in the
// EncryptedData MimeType) and, if asked, the SOAP Body content, for one
// recipient. It prepends an xenc:EncryptedKey (with its ReferenceList) and
// one xenc:EncryptedData per attachment to the wsse:Security header (created
// if absent), so that a signature already present is processed after
// decryption. It returns the encrypted attachments in input order; atts is
// not modified. doc is changed only on success.
func Encrypt(doc *etree.Document, atts []Attachment, recipient Recipient, opts EncryptOptions) ([]Attachment, error) {
	e, err := newEncryptor(doc, recipient, opts)
	if err != nil {
		return nil, fmt.Errorf("xmlenc: encrypt: %w", err)
	}
	out, err := e.run(atts)
	if err != nil {
		return nil, fmt.Errorf("xmlenc: encrypt: %w", err)
	}
	return out, nil
}

type encryptor struct {
	doc      *etree.Document
	env      *etree.Element
	soapNS   string
	rnd      io.Reader
	o        EncryptOptions
	rcpt     Recipient
	rsaPub   *rsa.PublicKey
	xPub     *ecdh.PublicKey
	bpPub    *brainpool.PublicKey // ECDH-ES on brainpoolP256r1 (BDEW AS4)
	keyLen   int
	cek      []byte
	security *etree.Element // existing header, or nil
	header   *etree.Element // existing soap:Header, or nil
}

func newEncryptor(doc *etree.Document, r Recipient, o EncryptOptions) (*encryptor, error) {
	e := &encryptor{doc: doc, o: o, rcpt: r, rnd: o.Rand}
	if e.rnd == nil {
		e.rnd = rand.Reader
	}
	if doc == nil || doc.Root() == nil {
		return nil, errors.New("no SOAP envelope")
	}
	e.env = doc.Root()
	e.soapNS = e.env.NamespaceURI()
	if e.env.Tag != "Envelope" || (e.soapNS != NSSOAP12 && e.soapNS != NSSOAP11) {
		return nil, errors.New("root element is not a SOAP Envelope")
	}
	if r.Cert == nil {
		return nil, errors.New("recipient certificate missing")
	}
	switch pub := r.Cert.PublicKey.(type) {
	case *rsa.PublicKey:
		e.rsaPub = pub
	case *brainpool.PublicKey:
		e.bpPub = pub
	default:
		k, err := x509.ParsePKIXPublicKey(r.Cert.RawSubjectPublicKeyInfo)
		if err != nil {
			return nil, fmt.Errorf("recipient key: %w", err)
		}
		xk, ok := k.(*ecdh.PublicKey)
		if !ok || xk.Curve() != ecdh.X25519() {
			return nil, fmt.Errorf("recipient key %T is neither RSA nor X25519", k)
		}
		e.xPub = xk
	}
	if e.o.Content == "" {
		e.o.Content = AlgAES128GCM
	}
	dc, ok := dataAlgs[e.o.Content]
	if !ok || !dc.gcm {
		return nil, fmt.Errorf("content encryption %s not offered (AES-GCM only)", e.o.Content)
	}
	e.keyLen = dc.keyLen
	if e.rsaPub != nil {
		if e.o.KeyTransport == "" {
			e.o.KeyTransport = AlgRSAOAEPMGF1P
		}
		if e.o.DigestMethod == "" {
			e.o.DigestMethod = AlgSHA256
		}
		switch e.o.KeyTransport {
		case AlgRSAOAEPMGF1P:
			e.o.MGF = AlgMGF1SHA1
		case AlgRSAOAEP:
			if e.o.MGF == "" {
				e.o.MGF = AlgMGF1SHA256
			}
		default:
			return nil, fmt.Errorf("key transport %s not offered", e.o.KeyTransport)
		}
		if _, ok := digestAlgs[e.o.DigestMethod]; !ok {
			return nil, fmt.Errorf("OAEP digest %s not offered", e.o.DigestMethod)
		}
		if _, ok := mgfAlgs[e.o.MGF]; !ok {
			return nil, fmt.Errorf("MGF %s not offered", e.o.MGF)
		}
	} else {
		if e.o.KeyWrap == "" {
			e.o.KeyWrap = AlgKWAES128
		}
		if keyWrapSizes[e.o.KeyWrap] == 0 {
			return nil, fmt.Errorf("key wrap %s not offered", e.o.KeyWrap)
		}
	}
	if e.header = child(e.env, e.soapNS, "Header"); e.header != nil {
		for _, s := range children(e.header, NSWSSE, "Security") {
			role := attrNS(s, e.soapNS, "role")
			if e.soapNS == NSSOAP11 {
				role = attrNS(s, e.soapNS, "actor")
			}
			if role == "" || role == roleUltimate12 {
				e.security = s
				break
			}
		}
	}
	return e, nil
}

func (e *encryptor) id(prefix string) (string, error) {
	b := make([]byte, 16)
	if _, err := io.ReadFull(e.rnd, b); err != nil {
		return "", fmt.Errorf("random: %w", err)
	}
	return prefix + hex.EncodeToString(b), nil
}

func (e *encryptor) random(n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(e.rnd, b); err != nil {
		return nil, fmt.Errorf("random: %w", err)
	}
	return b, nil
}

// seal returns IV ‖ ciphertext ‖ tag under the content key.
func (e *encryptor) seal(pt []byte) ([]byte, error) {
	iv, err := e.random(12)
	if err != nil {
		return nil, err
	}
	r, err := newSealer(e.cek, iv, bytes.NewReader(pt))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

// newSealer returns a reader of iv ‖ ciphertext ‖ tag of what src holds,
// AES-GCM encrypted under key as it is read.
func newSealer(key, iv []byte, src io.Reader) (*sealer, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	g, err := gcmstream.New(block, iv)
	if err != nil {
		return nil, err
	}
	return &sealer{src: src, g: g, out: iv, buf: make([]byte, cipherChunk)}, nil
}

// sealer is newSealer's reader.
type sealer struct {
	src  io.Reader
	g    *gcmstream.Stream
	buf  []byte
	out  []byte // encrypted bytes not yet returned
	done bool
}

func (s *sealer) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.done {
			return 0, io.EOF
		}
		k, err := s.src.Read(s.buf)
		if k > 0 {
			s.g.Encrypt(s.buf[:k], s.buf[:k])
			s.out = s.buf[:k]
		}
		if err == io.EOF {
			tag := s.g.Tag(nil)
			s.out = append(s.out, tag[:]...)
			s.done = true
		} else if err != nil {
			return 0, err
		}
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

// sealOnce is the Open of an attachment encrypted as a stream: its IV is
// drawn once, so its ciphertext may be read once.
func (e *encryptor) sealOnce(open func() (io.ReadCloser, error)) (func() (io.ReadCloser, error), error) {
	iv, err := e.random(12)
	if err != nil {
		return nil, err
	}
	key := bytes.Clone(e.cek) // Encrypt clears e.cek when it returns
	used := false
	return func() (io.ReadCloser, error) {
		if used {
			return nil, errors.New("xmlenc: an attachment encrypted as a stream is read once")
		}
		used = true
		src, err := open()
		if err != nil {
			return nil, err
		}
		r, err := newSealer(key, iv, src)
		if err != nil {
			src.Close()
			return nil, err
		}
		return struct {
			io.Reader
			io.Closer
		}{r, src}, nil
	}, nil
}

func (e *encryptor) run(atts []Attachment) ([]Attachment, error) {
	body := child(e.env, e.soapNS, "Body")
	encryptBody := e.o.EncryptBody && body != nil && hasContent(body)
	if len(atts) == 0 && !encryptBody {
		return nil, errors.New("nothing to encrypt")
	}
	var err error
	if e.cek, err = e.random(e.keyLen); err != nil {
		return nil, err
	}
	ekID, err := e.id("EK-")
	if err != nil {
		return nil, err
	}

	// Attachments.
	out := make([]Attachment, len(atts))
	var attEDs []*etree.Element
	var refIDs []string
	seen := map[string]bool{}
	for i, a := range atts {
		cid := normCID(a.ContentID)
		if cid == "" {
			return nil, fmt.Errorf("attachment %d has no Content-ID", i)
		}
		if seen[cid] {
			return nil, fmt.Errorf("Content-ID %q occurs twice", cid)
		}
		seen[cid] = true
		h := cloneHeader(a.Header)
		mime := h.Get("Content-Type")
		h.Set("Content-Type", "application/octet-stream")
		h.Del("Content-Length")
		out[i] = Attachment{ContentID: a.ContentID, Header: h}
		if a.Open != nil {
			// Encrypted as it is read (a message too large to hold).
			if out[i].Open, err = e.sealOnce(a.Open); err != nil {
				return nil, fmt.Errorf("attachment %q: %w", cid, err)
			}
		} else if out[i].Body, err = e.seal(a.Body); err != nil {
			return nil, fmt.Errorf("attachment %q: %w", cid, err)
		}

		edID, err := e.id("ED-")
		if err != nil {
			return nil, err
		}
		ed := newElement("xenc", NSXEnc, "EncryptedData")
		ed.CreateAttr("Id", edID)
		if mime != "" {
			ed.CreateAttr("MimeType", mime)
		}
		ed.CreateAttr("Type", TypeAttachmentContentOnly)
		sub(ed, "xenc", NSXEnc, "EncryptionMethod").CreateAttr("Algorithm", e.o.Content)
		e.keyInfoToEK(ed, ekID)
		cr := sub(sub(ed, "xenc", NSXEnc, "CipherData"), "xenc", NSXEnc, "CipherReference")
		cr.CreateAttr("URI", "cid:"+cid)
		sub(sub(cr, "xenc", NSXEnc, "Transforms"), "ds", NSDSig, "Transform").CreateAttr("Algorithm", TransformAttachmentCiphertext)
		attEDs = append(attEDs, ed)
		refIDs = append(refIDs, edID)
	}

	// SOAP Body content.
	var bodyED *etree.Element
	if encryptBody {
		ct, err := e.seal(serializeContent(body))
		if err != nil {
			return nil, fmt.Errorf("body: %w", err)
		}
		edID, err := e.id("ED-")
		if err != nil {
			return nil, err
		}
		bodyED = newElement("xenc", NSXEnc, "EncryptedData")
		bodyED.CreateAttr("Id", edID)
		bodyED.CreateAttr("Type", TypeContent)
		sub(bodyED, "xenc", NSXEnc, "EncryptionMethod").CreateAttr("Algorithm", e.o.Content)
		e.keyInfoToEK(bodyED, ekID)
		sub(sub(bodyED, "xenc", NSXEnc, "CipherData"), "xenc", NSXEnc, "CipherValue").SetText(base64.StdEncoding.EncodeToString(ct))
		refIDs = append(refIDs, edID)
	}

	ek, bst, err := e.encryptedKey(ekID, refIDs)
	if err != nil {
		return nil, err
	}

	// Apply to the document.
	sec := e.securityHeader()
	at := 0
	if bst != nil {
		sec.InsertChildAt(at, bst)
		at++
	}
	sec.InsertChildAt(at, ek)
	at++
	for _, ed := range attEDs {
		sec.InsertChildAt(at, ed)
		at++
	}
	if bodyED != nil {
		for len(body.Child) > 0 {
			body.RemoveChildAt(0)
		}
		body.AddChild(bodyED)
	}
	clear(e.cek)
	return out, nil
}

// hasContent reports whether e has element or non-whitespace text content.
func hasContent(e *etree.Element) bool {
	for _, c := range e.Child {
		switch t := c.(type) {
		case *etree.Element:
			return true
		case *etree.CharData:
			if !t.IsWhitespace() {
				return true
			}
		}
	}
	return false
}

// keyInfoToEK adds ds:KeyInfo/wsse:SecurityTokenReference/wsse:Reference to
// the EncryptedKey, as WSS4J and Holodeck write it.
func (e *encryptor) keyInfoToEK(ed *etree.Element, ekID string) {
	str := sub(sub(ed, "ds", NSDSig, "KeyInfo"), "wsse", NSWSSE, "SecurityTokenReference")
	str.CreateAttr("xmlns:wsse11", NSWSSE11)
	str.CreateAttr("wsse11:TokenType", tokenTypeEncKey)
	sub(str, "wsse", NSWSSE, "Reference").CreateAttr("URI", "#"+ekID)
}

// encryptedKey builds the xenc:EncryptedKey (and the BinarySecurityToken it
// references, if any).
func (e *encryptor) encryptedKey(ekID string, refIDs []string) (ek, bst *etree.Element, err error) {
	ek = newElement("xenc", NSXEnc, "EncryptedKey")
	ek.CreateAttr("Id", ekID)
	method := sub(ek, "xenc", NSXEnc, "EncryptionMethod")
	ki := sub(ek, "ds", NSDSig, "KeyInfo")
	var cipherValue []byte
	var refHolder *etree.Element
	if e.rsaPub != nil {
		method.CreateAttr("Algorithm", e.o.KeyTransport)
		sub(method, "ds", NSDSig, "DigestMethod").CreateAttr("Algorithm", e.o.DigestMethod)
		if e.o.KeyTransport == AlgRSAOAEP {
			sub(method, "xenc11", NSXEnc11, "MGF").CreateAttr("Algorithm", e.o.MGF)
		}
		cipherValue, err = rsa.EncryptOAEPWithOptions(e.rnd, e.rsaPub, e.cek, &rsa.OAEPOptions{
			Hash: digestAlgs[e.o.DigestMethod], MGFHash: mgfAlgs[e.o.MGF],
		})
		if err != nil {
			return nil, nil, fmt.Errorf("RSA-OAEP: %w", err)
		}
		refHolder = ki
	} else if e.bpPub != nil {
		method.CreateAttr("Algorithm", e.o.KeyWrap)
		if cipherValue, refHolder, err = e.writeECDHES(ki); err != nil {
			return nil, nil, err
		}
	} else {
		method.CreateAttr("Algorithm", e.o.KeyWrap)
		am := sub(ki, "xenc", NSXEnc, "AgreementMethod")
		am.CreateAttr("Algorithm", AlgX25519)
		kdm := sub(am, "xenc11", NSXEnc11, "KeyDerivationMethod")
		kdm.CreateAttr("Algorithm", AlgHKDF)
		params := sub(kdm, "dsig-more", NSDSigMore, "HKDFParams")
		sub(params, "dsig-more", NSDSigMore, "PRF").CreateAttr("Algorithm", AlgHMACSHA256)
		salt, err := e.random(32)
		if err != nil {
			return nil, nil, err
		}
		sub(params, "dsig-more", NSDSigMore, "Salt").SetText(base64.StdEncoding.EncodeToString(salt))
		if len(e.o.HKDFInfo) > 0 {
			sub(params, "dsig-more", NSDSigMore, "Info").SetText(base64.StdEncoding.EncodeToString(e.o.HKDFInfo))
		}
		kekLen := keyWrapSizes[e.o.KeyWrap]
		sub(params, "dsig-more", NSDSigMore, "KeyLength").SetText(strconv.Itoa(kekLen))

		eph, err := ecdh.X25519().GenerateKey(e.rnd)
		if err != nil {
			return nil, nil, fmt.Errorf("X25519: %w", err)
		}
		spki, err := x509.MarshalPKIXPublicKey(eph.PublicKey())
		if err != nil {
			return nil, nil, fmt.Errorf("X25519: %w", err)
		}
		oki := sub(am, "xenc", NSXEnc, "OriginatorKeyInfo")
		sub(sub(oki, "ds", NSDSig, "KeyValue"), "dsig11", NSDSig11, "DEREncodedKeyValue").SetText(base64.StdEncoding.EncodeToString(spki))
		refHolder = sub(am, "xenc", NSXEnc, "RecipientKeyInfo")

		shared, err := eph.ECDH(e.xPub)
		if err != nil {
			return nil, nil, fmt.Errorf("X25519: %w", err)
		}
		kek, err := hkdf.Key(sha256.New, shared, salt, string(e.o.HKDFInfo), kekLen)
		clear(shared)
		if err != nil {
			return nil, nil, fmt.Errorf("HKDF: %w", err)
		}
		cipherValue, err = KeyWrap(kek, e.cek)
		clear(kek)
		if err != nil {
			return nil, nil, err
		}
	}
	if bst, err = e.tokenReference(refHolder); err != nil {
		return nil, nil, err
	}
	sub(sub(ek, "xenc", NSXEnc, "CipherData"), "xenc", NSXEnc, "CipherValue").SetText(base64.StdEncoding.EncodeToString(cipherValue))
	rl := sub(ek, "xenc", NSXEnc, "ReferenceList")
	for _, id := range refIDs {
		sub(rl, "xenc", NSXEnc, "DataReference").CreateAttr("URI", "#"+id)
	}
	return ek, bst, nil
}

// tokenReference writes the wsse:SecurityTokenReference naming the
// recipient certificate into holder; for ByBinarySecurityToken it returns
// the token to add to the Security header.
func (e *encryptor) tokenReference(holder *etree.Element) (*etree.Element, error) {
	c := e.rcpt.Cert
	if e.rcpt.Reference == ByX509SKI {
		sub(sub(holder, "ds", NSDSig, "X509Data"), "ds", NSDSig, "X509SKI").SetText(base64.StdEncoding.EncodeToString(subjectKeyID(c)))
		return nil, nil
	}
	str := sub(holder, "wsse", NSWSSE, "SecurityTokenReference")
	keyID := func(valueType string, v []byte) {
		k := sub(str, "wsse", NSWSSE, "KeyIdentifier")
		k.CreateAttr("EncodingType", encodingBase64)
		k.CreateAttr("ValueType", valueType)
		k.SetText(base64.StdEncoding.EncodeToString(v))
	}
	switch e.rcpt.Reference {
	case ByIssuerSerial:
		iss := sub(sub(str, "ds", NSDSig, "X509Data"), "ds", NSDSig, "X509IssuerSerial")
		sub(iss, "ds", NSDSig, "X509IssuerName").SetText(c.Issuer.String())
		sub(iss, "ds", NSDSig, "X509SerialNumber").SetText(c.SerialNumber.String())
	case BySubjectKeyID:
		keyID(valueTypeSKI, subjectKeyID(c))
	case ByThumbprint:
		sum := sha1.Sum(c.Raw)
		keyID(valueTypeThumbprint, sum[:])
	case ByBinarySecurityToken:
		id, err := e.id("X509-")
		if err != nil {
			return nil, err
		}
		bst := newElement("wsse", NSWSSE, "BinarySecurityToken")
		bst.CreateAttr("xmlns:wsu", NSWSU)
		bst.CreateAttr("EncodingType", encodingBase64)
		bst.CreateAttr("ValueType", valueTypeX509v3)
		bst.CreateAttr("wsu:Id", id)
		bst.SetText(base64.StdEncoding.EncodeToString(c.Raw))
		r := sub(str, "wsse", NSWSSE, "Reference")
		r.CreateAttr("URI", "#"+id)
		r.CreateAttr("ValueType", valueTypeX509v3)
		return bst, nil
	default:
		return nil, fmt.Errorf("unknown key reference %d", e.rcpt.Reference)
	}
	return nil, nil
}

// securityHeader returns the wsse:Security header, creating soap:Header and
// wsse:Security (mustUnderstand) if needed.
func (e *encryptor) securityHeader() *etree.Element {
	if e.security != nil {
		return e.security
	}
	prefix := e.env.Space
	if e.header == nil {
		h := etree.NewElement("Header")
		h.Space = prefix
		e.env.InsertChildAt(firstElementIndex(e.env), h)
		e.header = h
	}
	sec := newElement("wsse", NSWSSE, "Security")
	if prefix == "" {
		prefix = "soapenv"
		sec.CreateAttr("xmlns:"+prefix, e.soapNS)
	}
	mu := "true"
	if e.soapNS == NSSOAP11 {
		mu = "1"
	}
	sec.CreateAttr(prefix+":mustUnderstand", mu)
	e.header.InsertChildAt(firstElementIndex(e.header), sec)
	e.security = sec
	return sec
}

func firstElementIndex(e *etree.Element) int {
	for i, c := range e.Child {
		if _, ok := c.(*etree.Element); ok {
			return i
		}
	}
	return len(e.Child)
}

// newElement creates a detached element prefix:local declaring prefix=ns.
func newElement(prefix, ns, local string) *etree.Element {
	el := etree.NewElement(prefix + ":" + local)
	el.CreateAttr("xmlns:"+prefix, ns)
	return el
}

// sub appends the child prefix:local to parent, declaring prefix=ns on it
// unless the prefix already resolves to ns there.
func sub(parent *etree.Element, prefix, ns, local string) *etree.Element {
	el := parent.CreateElement(prefix + ":" + local)
	if el.NamespaceURI() != ns {
		el.CreateAttr("xmlns:"+prefix, ns)
	}
	return el
}

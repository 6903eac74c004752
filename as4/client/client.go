// Package client is the sending side of AS4: it builds ebMS 3 user messages
// with their payloads as SOAP-with-attachments parts, compresses (gzip),
// signs (WS-Security over eb:Messaging, soap:Body and every attachment) and
// encrypts them (XML Encryption of the attachments), posts them and checks
// the synchronous answer: the receipt's signature must verify against the
// receiver's certificates, the receipt must refer to our eb:MessageId, and
// its ebbp:NonRepudiationInformation must list every ds:Reference we signed.
//
// Two algorithm families are supported through the keys given:
//   - RSA: rsa-sha256 (or any RSA SignatureMethod wssec supports, e.g.
//     rsa-sha512) with RSA-OAEP key transport and AES-GCM content
//     encryption (the AS4 profile and eDelivery AS4 1.x);
//   - eDelivery AS4 2.0: an Ed25519 signing key (eddsa-ed25519) and an
//     X25519 recipient certificate (X25519 key agreement, HKDF, AES key
//     wrap) with AES-GCM;
//   - the BDEW AS4 profile: a brainpoolP256r1 signing key (ecdsa-sha256,
//     PKIPath token) and a brainpoolP256r1 recipient certificate (ECDH-ES,
//     ConcatKDF SHA-256, kw-aes128, RecipientKeyInfo by X509SKI) with
//     AES-128-GCM.
//
// The order is the AS4 norm: compress, sign, encrypt.
package client

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/internal/sendspool"
	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/internal/wssec"
	"github.com/edigateway/gateway/internal/xmlenc"
	"github.com/edigateway/gateway/receipt"
)

// Default roles of ebMS 3 Core §5.2.2.3.
const (
	RoleInitiator = "http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/initiator"
	RoleResponder = "http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/responder"
)

// DefaultMaxResponse bounds the response body the client reads.
const DefaultMaxResponse = 16 << 20

// Client builds and sends AS4 user messages. The zero value is not usable:
// Signer and Certificate are required.
type Client struct {
	// Signer is our signing key (RSA, ECDSA, or Ed25519 for eDelivery AS4
	// 2.0) and Certificate its certificate, sent as a BinarySecurityToken.
	Signer      crypto.Signer
	Certificate *x509.Certificate
	// SignatureMethod and DigestMethod are wssec algorithm URIs; empty
	// takes the key's default (rsa-sha256, ecdsa-sha*, eddsa-ed25519) and
	// SHA-256.
	SignatureMethod string
	DigestMethod    string
	// PKIPath sends Certificate (after the issuers in Chain, closest first)
	// as an X509PKIPathv1 token, as the BDEW AS4 profile asks.
	PKIPath bool
	Chain   []*x509.Certificate
	// Encryption, when set, encrypts every attachment for the receiver.
	Encryption *Encryption
	// ReceiptSigners are the receiver's certificates that may sign its
	// receipts and error signals (several during a rollover). Required to
	// accept a receipt, unless VerifySigner is set.
	ReceiptSigners []*x509.Certificate
	// VerifySigner, when set, turns on CA trust for receipts and error
	// signals (a receiver under trust: ca): a certificate of a
	// wsse:BinarySecurityToken of the answer (X509v3 or X509PKIPathv1) may
	// be the signer as well as ReceiptSigners, and once the signature
	// verified with its key, VerifySigner decides whether that signer is
	// trusted (presented: the tokens' certificates, chain material). Its
	// refusal leaves the answer unverified.
	VerifySigner func(signer *x509.Certificate, presented []*x509.Certificate) error
	// TimestampTTL, when positive, adds a signed wsu:Timestamp to our
	// messages that expires TimestampTTL after creation.
	TimestampTTL time.Duration
	// ClockSkew is the tolerance of the receipt's wsu:Timestamp check
	// (default wssec.DefaultClockSkew).
	ClockSkew time.Duration
	// HTTP is the client used to post (default: a client with a 2-minute
	// timeout).
	HTTP *http.Client
	// Now is the clock (default time.Now); Rand the randomness source for
	// ids, keys and signatures (default crypto/rand).
	Now  func() time.Time
	Rand io.Reader
	// Host is the domain part of generated message and content ids
	// (default "gateway").
	Host string
	// MaxResponse bounds the response body read (default DefaultMaxResponse).
	MaxResponse int64
	// AllowWeakKeys accepts receipt signers and an encryption recipient
	// with RSA keys of 1024 to 2047 bits (legacy receivers). Either must
	// be valid at Now in any case (trust.CheckSigner).
	AllowWeakKeys bool
	// GzipLevel is the compress/gzip level of Payload.Compress (default
	// gzip.DefaultCompression; gzip.BestSpeed trades size for speed).
	GzipLevel int
	// SpoolDir is where Prepare writes the message and its compressed
	// payloads (default os.TempDir()).
	SpoolDir string
	// Progress, when set, is called as Prepare reads the payloads: done
	// counts the bytes read from Payload.Open (or Data) against total, the
	// payloads' sizes times the reads each needs (one when Compress is
	// set, two otherwise: the digest, then the encryption).
	Progress func(done, total int64)
}

// Encryption says for whom and how attachments are encrypted.
type Encryption struct {
	// Recipient is the receiver's encryption certificate: an RSA key gives
	// RSA-OAEP key transport, an X25519 key eDelivery AS4 2.0 key agreement.
	Recipient *x509.Certificate
	// KeyReference is how the EncryptedKey names the recipient certificate
	// (default X509IssuerSerial).
	KeyReference KeyReference
	// Options select the algorithms (zero: rsa-oaep-mgf1p with SHA-256, or
	// X25519/HKDF/kw-aes128; AES-128-GCM). Rand is taken from the Client.
	Options EncryptOptions
}

// Message is a user message to send.
type Message struct {
	// MessageID is the eb:MessageId (default: a new UUID @ Host).
	MessageID      string
	RefToMessageID string
	// ConversationID defaults to the message id, unless
	// EmptyConversationID is set.
	ConversationID string
	// EmptyConversationID writes an empty eb:ConversationId when
	// ConversationID is empty, as the BDEW and ENTSOG profiles have it
	// (phase4's senders for both always write it empty).
	EmptyConversationID bool
	// From and To are the parties; their roles default to RoleInitiator
	// and RoleResponder.
	From, To         as4.PartyID
	FromRole, ToRole string
	// AgreementRef, with its optional type and the P-Mode id (pmode
	// attribute).
	AgreementRef, AgreementType, PMode string
	Service, ServiceType, Action       string
	// Properties are the eb:MessageProperties.
	Properties []as4.Property
	// Payloads are sent as attachments, one eb:PartInfo each.
	Payloads []Payload
}

// Payload is one attachment.
type Payload struct {
	// ContentID without angle brackets (default: generated).
	ContentID string
	// MimeType of the (uncompressed) content; default application/octet-stream.
	MimeType     string
	CharacterSet string
	Data         []byte
	// Open, when set, reads the content instead of Data (a file): Prepare
	// reads it as a stream, once when Compress is set (into a gzip spool
	// file), twice otherwise. Size is its length, for Client.Progress.
	Open func() (io.ReadCloser, error)
	Size int64
	// Compress gzips the content before signing (CompressionType
	// application/gzip).
	Compress bool
	// Compressed declares that the content is already gzip-compressed.
	Compressed bool
	// Properties are further eb:PartProperties.
	Properties []as4.Property
}

// Outgoing is a built message, ready to post (and to post again: a
// retransmission sends the very same bytes).
type Outgoing struct {
	MessageID   string
	ContentType string
	// Body is the HTTP body of a message made by Build; a message made by
	// Prepare has its body in a spool file (Body is nil).
	Body []byte
	// References are the ds:References our signature made: the receipt
	// must acknowledge each of them.
	References []receipt.Reference

	spool *sendspool.File
}

// Size is the HTTP body's length.
func (o *Outgoing) Size() int64 { return sendspool.BodySize(o.spool, o.Body) }

// BodyReader reads the HTTP body from its start (every call anew).
func (o *Outgoing) BodyReader() io.Reader { return sendspool.BodyReader(o.spool, o.Body) }

// Close releases the spool file of a message made by Prepare.
func (o *Outgoing) Close() error {
	err := o.spool.Close()
	o.spool = nil
	return err
}

func (c *Client) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Client) rand() io.Reader {
	if c.Rand != nil {
		return c.Rand
	}
	return rand.Reader
}

func (c *Client) host() string {
	if c.Host != "" {
		return c.Host
	}
	return "gateway"
}

func (c *Client) newID() (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(c.rand(), b[:]); err != nil {
		return "", fmt.Errorf("as4 client: random id: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:] + "@" + c.host(), nil
}

// Build compresses, signs and encrypts m in memory (Message.Body).
func (c *Client) Build(m *Message) (*Outgoing, error) {
	var body bytes.Buffer
	out, err := c.build(m, &body, false)
	if err != nil {
		return nil, err
	}
	out.Body = body.Bytes()
	return out, nil
}

// Prepare compresses, signs and encrypts m as Build does, in memory that
// does not depend on the payloads' sizes: every payload is read as a
// stream (Payload.Open, or Data), gzipped into a spool file when it is to
// be compressed, digested from there, then encrypted as it is written
// after the SOAP envelope into the message's spool file in SpoolDir,
// unlinked at once where the system allows it, read for every Post and
// released by Outgoing.Close. The disk needs room for about twice the
// compressed payloads while the message is built, then for the message.
func (c *Client) Prepare(m *Message) (out *Outgoing, err error) {
	f, err := sendspool.Create(c.SpoolDir, "gateway-send-*.as4")
	if err != nil {
		return nil, fmt.Errorf("as4 client: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if out, err = c.build(m, f, true); err != nil {
		return nil, err
	}
	if err := f.Finish(); err != nil {
		return nil, fmt.Errorf("as4 client: %w", err)
	}
	out.spool = f
	return out, nil
}

// build writes the HTTP body of m to w. With stream, payload contents are
// read as streams and compressed into spool files (closed when build
// returns), never held.
func (c *Client) build(m *Message, w io.Writer, stream bool) (*Outgoing, error) {
	if c.Signer == nil || c.Certificate == nil {
		return nil, errors.New("as4 client: Signer and Certificate are required")
	}
	if m.From.Value == "" || m.To.Value == "" || m.Service == "" || m.Action == "" {
		return nil, errors.New("as4 client: From, To, Service and Action are required")
	}
	id := m.MessageID
	if id == "" {
		var err error
		if id, err = c.newID(); err != nil {
			return nil, err
		}
	}
	doc, header := envelope()
	msgEl := header.CreateElement("eb:Messaging")
	msgEl.CreateAttr("xmlns:eb", as4.NSEbMS)
	msgEl.CreateAttr("S12:mustUnderstand", "true")
	um := msgEl.CreateElement("eb:UserMessage")
	mi := um.CreateElement("eb:MessageInfo")
	mi.CreateElement("eb:Timestamp").SetText(c.now().UTC().Format("2006-01-02T15:04:05.000Z"))
	mi.CreateElement("eb:MessageId").SetText(id)
	if m.RefToMessageID != "" {
		mi.CreateElement("eb:RefToMessageId").SetText(m.RefToMessageID)
	}
	pi := um.CreateElement("eb:PartyInfo")
	party(pi.CreateElement("eb:From"), m.From, orDefault(m.FromRole, RoleInitiator))
	party(pi.CreateElement("eb:To"), m.To, orDefault(m.ToRole, RoleResponder))
	ci := um.CreateElement("eb:CollaborationInfo")
	if m.AgreementRef != "" {
		ar := ci.CreateElement("eb:AgreementRef")
		ar.SetText(m.AgreementRef)
		if m.AgreementType != "" {
			ar.CreateAttr("type", m.AgreementType)
		}
		if m.PMode != "" {
			ar.CreateAttr("pmode", m.PMode)
		}
	}
	svc := ci.CreateElement("eb:Service")
	svc.SetText(m.Service)
	if m.ServiceType != "" {
		svc.CreateAttr("type", m.ServiceType)
	}
	ci.CreateElement("eb:Action").SetText(m.Action)
	conv := orDefault(m.ConversationID, id)
	if m.ConversationID == "" && m.EmptyConversationID {
		conv = ""
	}
	ci.CreateElement("eb:ConversationId").SetText(conv)
	if len(m.Properties) > 0 {
		properties(um.CreateElement("eb:MessageProperties"), m.Properties)
	}

	var atts []wssec.Attachment
	// The compressed payloads' spool files, read until the message is
	// written.
	var spools []*sendspool.File
	defer func() {
		for _, f := range spools {
			f.Close()
		}
	}()
	progress := newPayloadProgress(c.Progress, m.Payloads)
	if len(m.Payloads) > 0 {
		pinfo := um.CreateElement("eb:PayloadInfo")
		for i, p := range m.Payloads {
			cid := p.ContentID
			if cid == "" {
				g, err := c.newID()
				if err != nil {
					return nil, err
				}
				cid = fmt.Sprintf("part%d-%s", i+1, g)
			}
			cid = strings.TrimSuffix(strings.TrimPrefix(cid, "<"), ">")
			mt := orDefault(p.MimeType, "application/octet-stream")
			data, ct := p.Data, mt
			props := []as4.Property{{Name: as4.PropMimeType, Value: mt}}
			if p.CharacterSet != "" {
				props = append(props, as4.Property{Name: as4.PropCharacterSet, Value: p.CharacterSet})
			}
			var open func() (io.ReadCloser, error)
			if stream {
				open = progress.opener(p)
			} else if p.Open != nil && p.Data == nil {
				var err error
				if data, err = readAll(p.Open); err != nil {
					return nil, err
				}
			}
			if p.Compress || p.Compressed {
				if p.Compress {
					var err error
					if stream {
						if open, err = c.gzipSpool(open, &spools); err != nil {
							return nil, err
						}
					} else if data, err = c.gzipBytes(data); err != nil {
						return nil, err
					}
				}
				ct = as4.CompressionGzip
				props = append(props, as4.Property{Name: as4.PropCompressionType, Value: as4.CompressionGzip})
			}
			props = append(props, p.Properties...)
			part := pinfo.CreateElement("eb:PartInfo")
			part.CreateAttr("href", "cid:"+cid)
			properties(part.CreateElement("eb:PartProperties"), props)
			att := wssec.Attachment{
				ContentID: cid,
				Header:    textproto.MIMEHeader{"Content-Type": {ct}, "Content-Id": {"<" + cid + ">"}},
				Body:      data,
			}
			if stream {
				att.Body, att.Open = nil, open
			}
			atts = append(atts, att)
		}
	}

	if err := wssec.Sign(doc, atts, wssec.SignOptions{
		Signer: c.Signer, Certificate: c.Certificate,
		SignatureMethod: c.SignatureMethod, DigestMethod: c.DigestMethod,
		TimestampTTL: c.TimestampTTL, Now: c.now, Rand: c.rand(),
		PKIPath: c.PKIPath, Chain: c.Chain,
	}); err != nil {
		return nil, fmt.Errorf("as4 client: sign: %w", err)
	}
	sig, err := wssec.ParseSignature(doc, wssec.VerifyOptions{MaxReferences: len(atts) + 3, AllowSHA1: true})
	if err != nil {
		return nil, fmt.Errorf("as4 client: reading our own signature: %w", err)
	}
	refs := make([]receipt.Reference, len(sig.References))
	for i, r := range sig.References {
		refs[i] = receipt.Reference{URI: r.URI, DigestMethod: r.DigestMethod, DigestValue: r.DigestValue}
		for _, t := range r.Transforms {
			refs[i].Transforms = append(refs[i].Transforms, receipt.Transform{Algorithm: t.Algorithm, PrefixList: t.PrefixList})
		}
	}

	parts := make([]xmlenc.Attachment, len(atts))
	for i, a := range atts {
		parts[i] = xmlenc.Attachment{ContentID: a.ContentID, Header: a.Header, Body: a.Body, Open: a.Open}
	}
	if c.Encryption != nil && len(parts) > 0 {
		if c.Encryption.Recipient == nil {
			return nil, errors.New("as4 client: Encryption without Recipient certificate")
		}
		if err := trust.CheckSigner(c.Encryption.Recipient, c.now(), trust.Policy{AllowWeakKeys: c.AllowWeakKeys}); err != nil {
			return nil, fmt.Errorf("as4 client: the encryption recipient's %w", err)
		}
		opts := c.Encryption.Options
		opts.Rand = c.rand()
		parts, err = xmlenc.Encrypt(doc, parts, xmlenc.Recipient{Cert: c.Encryption.Recipient, Reference: c.Encryption.KeyReference}, opts)
		if err != nil {
			return nil, fmt.Errorf("as4 client: encrypt: %w", err)
		}
	}
	soap, err := doc.WriteToBytes()
	if err != nil {
		return nil, fmt.Errorf("as4 client: serialise: %w", err)
	}
	out := &Outgoing{MessageID: id, References: refs}
	if len(parts) == 0 {
		out.ContentType = "application/soap+xml; charset=UTF-8"
		if _, err := w.Write(soap); err != nil {
			return nil, fmt.Errorf("as4 client: %w", err)
		}
		return out, nil
	}
	if out.ContentType, err = c.multipart(w, soap, parts); err != nil {
		return nil, err
	}
	return out, nil
}

func envelope() (*etree.Document, *etree.Element) {
	doc := etree.NewDocument()
	doc.CreateProcInst("xml", `version="1.0" encoding="UTF-8"`)
	env := doc.CreateElement("S12:Envelope")
	env.CreateAttr("xmlns:S12", as4.NSSOAP12)
	header := env.CreateElement("S12:Header")
	env.CreateElement("S12:Body")
	return doc, header
}

func party(el *etree.Element, id as4.PartyID, role string) {
	p := el.CreateElement("eb:PartyId")
	if id.Type != "" {
		p.CreateAttr("type", id.Type)
	}
	p.SetText(id.Value)
	el.CreateElement("eb:Role").SetText(role)
}

func properties(el *etree.Element, props []as4.Property) {
	for _, p := range props {
		e := el.CreateElement("eb:Property")
		e.CreateAttr("name", p.Name)
		if p.Type != "" {
			e.CreateAttr("type", p.Type)
		}
		e.SetText(p.Value)
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func (c *Client) gzipBytes(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	if err := c.gzip(&buf, bytes.NewReader(b)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// gzip writes the gzip stream of what r reads to w, at GzipLevel.
func (c *Client) gzip(w io.Writer, r io.Reader) error {
	level := c.GzipLevel
	if level == 0 {
		level = gzip.DefaultCompression
	}
	zw, err := gzip.NewWriterLevel(w, level)
	if err != nil {
		return fmt.Errorf("as4 client: gzip: %w", err)
	}
	if _, err := io.CopyBuffer(zw, struct{ io.Reader }{r}, make([]byte, 64<<10)); err != nil {
		return fmt.Errorf("as4 client: gzip: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("as4 client: gzip: %w", err)
	}
	return nil
}

// multipart writes the SOAP part and the attachments (their Body, or what
// their Open reads) to w as multipart/related with binary parts and
// returns its Content-Type.
func (c *Client) multipart(w io.Writer, soap []byte, parts []xmlenc.Attachment) (string, error) {
	rootID, err := c.newID()
	if err != nil {
		return "", err
	}
	rootID = "root-" + rootID
	mw := multipart.NewWriter(w)
	var b [24]byte
	if _, err := io.ReadFull(c.rand(), b[:]); err != nil {
		return "", fmt.Errorf("as4 client: boundary: %w", err)
	}
	if err := mw.SetBoundary("MIMEBoundary_" + hex.EncodeToString(b[:])); err != nil {
		return "", err
	}
	write := func(h textproto.MIMEHeader, body []byte, open func() (io.ReadCloser, error)) error {
		pw, err := mw.CreatePart(h)
		if err != nil {
			return err
		}
		if open == nil {
			_, err = pw.Write(body)
			return err
		}
		rc, err := open()
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = io.CopyBuffer(pw, struct{ io.Reader }{rc}, make([]byte, 64<<10))
		return err
	}
	if err := write(textproto.MIMEHeader{
		"Content-Type":              {"application/soap+xml; charset=UTF-8"},
		"Content-Transfer-Encoding": {"binary"},
		"Content-Id":                {"<" + rootID + ">"},
	}, soap, nil); err != nil {
		return "", fmt.Errorf("as4 client: MIME: %w", err)
	}
	for _, p := range parts {
		cid := strings.TrimSuffix(strings.TrimPrefix(p.ContentID, "<"), ">")
		if err := write(textproto.MIMEHeader{
			"Content-Type":              {p.Header.Get("Content-Type")},
			"Content-Transfer-Encoding": {"binary"},
			"Content-Id":                {"<" + cid + ">"},
		}, p.Body, p.Open); err != nil {
			return "", fmt.Errorf("as4 client: MIME: attachment %s: %w", cid, err)
		}
	}
	if err := mw.Close(); err != nil {
		return "", fmt.Errorf("as4 client: MIME: %w", err)
	}
	return mime.FormatMediaType("multipart/related", map[string]string{
		"boundary": mw.Boundary(), "type": "application/soap+xml", "start": "<" + rootID + ">",
	}), nil
}

// gzipSpool gzips what open reads into a new spool file, appended to
// spools, and returns the file's opener.
func (c *Client) gzipSpool(open func() (io.ReadCloser, error), spools *[]*sendspool.File) (func() (io.ReadCloser, error), error) {
	f, err := sendspool.Create(c.SpoolDir, "gateway-send-*.gz")
	if err != nil {
		return nil, fmt.Errorf("as4 client: %w", err)
	}
	*spools = append(*spools, f)
	rc, err := open()
	if err != nil {
		return nil, fmt.Errorf("as4 client: payload: %w", err)
	}
	defer rc.Close()
	if err := c.gzip(f, rc); err != nil {
		return nil, err
	}
	if err := f.Finish(); err != nil {
		return nil, fmt.Errorf("as4 client: %w", err)
	}
	return f.Open, nil
}

func readAll(open func() (io.ReadCloser, error)) ([]byte, error) {
	rc, err := open()
	if err != nil {
		return nil, fmt.Errorf("as4 client: payload: %w", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("as4 client: payload: %w", err)
	}
	return b, nil
}

// payloadProgress counts the payload bytes Prepare reads for
// Client.Progress.
type payloadProgress struct {
	fn          func(done, total int64)
	done, total int64
}

func newPayloadProgress(fn func(done, total int64), payloads []Payload) *payloadProgress {
	p := &payloadProgress{fn: fn}
	for _, pl := range payloads {
		size := pl.Size
		if pl.Open == nil {
			size = int64(len(pl.Data))
		}
		if pl.Compress {
			p.total += size
		} else {
			p.total += 2 * size
		}
	}
	return p
}

// opener reads the payload's content (Open, or Data), counted.
func (p *payloadProgress) opener(pl Payload) func() (io.ReadCloser, error) {
	open := pl.Open
	if open == nil {
		data := pl.Data
		open = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	}
	if p.fn == nil {
		return open
	}
	return func() (io.ReadCloser, error) {
		rc, err := open()
		if err != nil {
			return nil, err
		}
		return struct {
			io.Reader
			io.Closer
		}{&countingReader{r: rc, p: p}, rc}, nil
	}
}

type countingReader struct {
	r io.Reader
	p *payloadProgress
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	if n > 0 {
		c.p.done += int64(n)
		c.p.fn(c.p.done, c.p.total)
	}
	return n, err
}

// Response is the partner's synchronous answer.
type Response struct {
	Status      int
	ContentType string
	// RetryAfter is the Retry-After header of a 503 answer.
	RetryAfter string
	// Body is the signal as received.
	Body []byte
	// Receipt is the verified receipt, nil when the answer is not one.
	Receipt *receipt.Receipt
	// Signer is the certificate whose signature over the answer verified
	// (a receipt or an error signal); nil when none did.
	Signer *x509.Certificate
}

// Send builds m and posts it to url.
func (c *Client) Send(ctx context.Context, url string, m *Message) (*Outgoing, *Response, error) {
	out, err := c.Build(m)
	if err != nil {
		return nil, nil, err
	}
	resp, err := c.Post(ctx, url, out)
	return out, resp, err
}

// ErrNoSignal reports an answer that holds no ebMS signal (for example a
// 503 while the message is processed elsewhere, or an HTTP error page).
var ErrNoSignal = errors.New("as4 client: the answer is not an ebMS signal")

// Post sends out to url and verifies the answer. It returns the response
// whenever one was read. A verified error signal gives an error wrapping
// *receipt.SignalError; an answer that is not a signal wraps ErrNoSignal;
// a valid receipt of an earlier transmission of the same eb:MessageId is
// set in Response.Receipt and reported with an error wrapping
// ErrNotCovered.
func (c *Client) Post(ctx context.Context, url string, out *Outgoing) (*Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, out.BodyReader())
	if err != nil {
		return nil, fmt.Errorf("as4 client: %w", err)
	}
	req.ContentLength = out.Size()
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(out.BodyReader()), nil }
	req.Header.Set("Content-Type", out.ContentType)
	req.Header.Set("Mime-Version", "1.0")
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 2 * time.Minute}
	}
	hr, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("as4 client: post: %w", err)
	}
	defer hr.Body.Close()
	max := c.MaxResponse
	if max <= 0 {
		max = DefaultMaxResponse
	}
	body, err := io.ReadAll(io.LimitReader(hr.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("as4 client: reading the answer: %w", err)
	}
	if int64(len(body)) > max {
		return nil, fmt.Errorf("as4 client: answer larger than %d bytes", max)
	}
	resp := &Response{Status: hr.StatusCode, ContentType: hr.Header.Get("Content-Type"), RetryAfter: hr.Header.Get("Retry-After"), Body: body}
	mt, _, _ := mime.ParseMediaType(resp.ContentType)
	if mt != "application/soap+xml" && mt != "text/xml" && mt != "multipart/related" {
		return resp, fmt.Errorf("%w: HTTP %d %s: %s", ErrNoSignal, hr.StatusCode, resp.ContentType, snippet(body))
	}
	r, signer, err := verifyReceipt(resp.ContentType, body, ReceiptCheck{
		Trusted: c.ReceiptSigners, MessageID: out.MessageID, References: out.References,
		Now: c.now, ClockSkew: c.ClockSkew, AllowWeakKeys: c.AllowWeakKeys, CheckSigner: c.VerifySigner,
	})
	resp.Signer = signer
	if errors.Is(err, ErrNotCovered) {
		resp.Receipt = r
	}
	if err != nil {
		return resp, fmt.Errorf("HTTP %d: %w", hr.StatusCode, err)
	}
	if hr.StatusCode != http.StatusOK {
		return resp, fmt.Errorf("as4 client: receipt with HTTP status %d", hr.StatusCode)
	}
	resp.Receipt = r
	return resp, nil
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

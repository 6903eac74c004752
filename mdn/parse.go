package mdn

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/edigateway/gateway/internal/smime"
)

// Errors callers branch on. Parse errors wrap ErrMalformed; Verify errors
// wrap ErrNotSigned or ErrSignature.
var (
	ErrMalformed = errors.New("mdn: malformed MDN")
	ErrNotSigned = errors.New("mdn: MDN is not signed")
	ErrSignature = errors.New("mdn: MDN signature invalid")
)

// Parsed is an MDN as received by the sender of the original message.
type Parsed struct {
	// Report holds the disposition-notification fields, the human text and,
	// when parsed by ParseMessage or ParseHTTP, the transport headers.
	// Report.MICAlg is canonical (CanonicalMICAlg); Fields keeps it raw.
	Report Report
	// Fields holds every field of the message/disposition-notification part,
	// unfolded with each run of SP and HTAB made one SP, keyed
	// case-insensitively (use Fields.Get).
	Fields textproto.MIMEHeader
	// Signed is true for a multipart/signed MDN.
	Signed bool
	// SignedContent is the exact bytes of the first part of a
	// multipart/signed MDN (the signed multipart/report entity with its
	// headers), the content a detached signature covers.
	SignedContent []byte
	// Signature is the DER (or BER) of the application/pkcs7-signature part.
	Signature []byte
	// SignatureMICAlg is the micalg parameter of multipart/signed as sent.
	SignatureMICAlg string
}

// Verify calls verify with the signature and the exact signed bytes. It
// returns ErrNotSigned for an unsigned MDN and wraps verify's error in
// ErrSignature.
func (p *Parsed) Verify(verify func(sig, content []byte) error) error {
	if p == nil || !p.Signed {
		return ErrNotSigned
	}
	if err := verify(p.Signature, p.SignedContent); err != nil {
		return fmt.Errorf("%w: %w", ErrSignature, err)
	}
	return nil
}

// maxMDNSize bounds the input Parse accepts; real MDNs are a few KB.
const maxMDNSize = 4 << 20

// Parse parses an MDN body with its Content-Type header value: a
// multipart/signed MDN (whose first part is the multipart/report and second
// the application/pkcs7-signature) or a bare multipart/report. It tolerates
// LF-only line ends, folded header lines, preambles, and base64,
// quoted-printable, 7bit, 8bit or binary transfer encodings on the parts.
// The signature is not checked: call Verify.
func Parse(contentType string, body []byte) (*Parsed, error) {
	if len(body) > maxMDNSize {
		return nil, fmt.Errorf("%w: %d bytes exceeds the %d byte limit", ErrMalformed, len(body), maxMDNSize)
	}
	mt, params := mediaType(contentType)
	p := &Parsed{Fields: textproto.MIMEHeader{}}
	switch mt {
	case "multipart/signed":
		parts, err := splitParts(body, params)
		if err != nil {
			return nil, fmt.Errorf("%w: multipart/signed: %w", ErrMalformed, err)
		}
		if len(parts) < 2 {
			return nil, fmt.Errorf("%w: multipart/signed has %d parts, want 2", ErrMalformed, len(parts))
		}
		p.Signed = true
		p.SignedContent = parts[0]
		p.SignatureMICAlg = params["micalg"]
		sig, err := signaturePart(parts[1])
		if err != nil {
			return nil, fmt.Errorf("%w: signature part: %w", ErrMalformed, err)
		}
		p.Signature = sig
		inner, err := smime.ParseEntity(parts[0])
		if err != nil {
			return nil, fmt.Errorf("%w: signed content: %w", ErrMalformed, err)
		}
		imt, iparams := mediaType(inner.Header.Get("Content-Type"))
		if imt != "multipart/report" {
			return nil, fmt.Errorf("%w: signed content is %q, want multipart/report", ErrMalformed, imt)
		}
		body, err := inner.DecodedBody()
		if err != nil {
			return nil, fmt.Errorf("%w: signed content: %w", ErrMalformed, err)
		}
		if err := p.parseReport(body, iparams); err != nil {
			return nil, err
		}
	case "multipart/report":
		if err := p.parseReport(body, params); err != nil {
			return nil, err
		}
	case "":
		return nil, fmt.Errorf("%w: no Content-Type", ErrMalformed)
	default:
		return nil, fmt.Errorf("%w: Content-Type %q is not multipart/signed or multipart/report", ErrMalformed, mt)
	}
	return p, nil
}

// ParseMessage parses an MDN stored with its header block (as in a file or
// an async MDN request dump): the headers give Content-Type, Message-ID,
// AS2-From and AS2-To.
func ParseMessage(raw []byte) (*Parsed, error) {
	if len(raw) > maxMDNSize {
		return nil, fmt.Errorf("%w: %d bytes exceeds the %d byte limit", ErrMalformed, len(raw), maxMDNSize)
	}
	e, err := smime.ParseEntity(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: header block: %w", ErrMalformed, err)
	}
	h := e.Header
	if h.Get("Content-Type") == "" {
		return nil, fmt.Errorf("%w: no Content-Type header", ErrMalformed)
	}
	p, err := Parse(h.Get("Content-Type"), e.Body)
	if err != nil {
		return nil, err
	}
	p.setTransport(h.Get("Message-Id"), h.Get("As2-From"), h.Get("As2-To"))
	return p, nil
}

// ParseHTTP parses an MDN received over HTTP (a sync MDN response or an
// async MDN request) from its headers and body.
func ParseHTTP(h http.Header, body []byte) (*Parsed, error) {
	p, err := Parse(h.Get("Content-Type"), body)
	if err != nil {
		return nil, err
	}
	p.setTransport(h.Get("Message-Id"), h.Get("As2-From"), h.Get("As2-To"))
	return p, nil
}

func (p *Parsed) setTransport(messageID, from, to string) {
	p.Report.MessageID = strings.TrimSpace(messageID)
	p.Report.AS2From = unquoteAS2ID(from)
	p.Report.AS2To = unquoteAS2ID(to)
}

// splitParts splits a multipart body using the boundary parameter, or a
// boundary sniffed from the body when the parameter is missing.
func splitParts(body []byte, params map[string]string) ([][]byte, error) {
	boundary := params["boundary"]
	if boundary == "" {
		boundary = sniffBoundary(body)
	}
	if boundary == "" {
		return nil, errors.New("no boundary")
	}
	return splitMultipart(body, boundary)
}

// signaturePart returns the signature bytes of an application/pkcs7-signature
// part. Without a Content-Transfer-Encoding header a body that is not DER
// (does not start with a SEQUENCE tag) is taken to be base64.
func signaturePart(raw []byte) ([]byte, error) {
	e := parsePart(raw)
	mt, _ := mediaType(e.Header.Get("Content-Type"))
	switch mt {
	case "application/pkcs7-signature", "application/x-pkcs7-signature", "":
	default:
		return nil, fmt.Errorf("Content-Type %q is not application/pkcs7-signature", mt)
	}
	var sig []byte
	var err error
	if e.Header.Get("Content-Transfer-Encoding") == "" && (len(e.Body) == 0 || e.Body[0] != 0x30) {
		sig, err = decodeBase64(e.Body)
	} else {
		sig, err = e.DecodedBody()
	}
	if err != nil {
		return nil, err
	}
	// Drop bytes after a definite-length DER SEQUENCE (line breaks a sender
	// appended after binary DER).
	if n, ok := derLength(sig); ok && n < len(sig) {
		sig = sig[:n]
	}
	if len(sig) == 0 {
		return nil, errors.New("empty signature")
	}
	return sig, nil
}

// parseReport parses a multipart/report body: the first text/plain part is
// the human text, the message/disposition-notification part the fields.
func (p *Parsed) parseReport(body []byte, params map[string]string) error {
	if rt := params["report-type"]; rt != "" && !strings.EqualFold(rt, "disposition-notification") {
		return fmt.Errorf("%w: report-type %q, want disposition-notification", ErrMalformed, rt)
	}
	parts, err := splitParts(body, params)
	if err != nil {
		return fmt.Errorf("%w: multipart/report: %w", ErrMalformed, err)
	}
	var notification []byte
	found, haveText := false, false
	for _, raw := range parts {
		e := parsePart(raw)
		mt, _ := mediaType(e.Header.Get("Content-Type"))
		switch {
		case mt == "message/disposition-notification" && !found:
			dec, err := e.DecodedBody()
			if err != nil {
				return fmt.Errorf("%w: disposition-notification part: %w", ErrMalformed, err)
			}
			notification, found = dec, true
		case (mt == "text/plain" || mt == "") && !haveText:
			dec, err := e.DecodedBody()
			if err != nil {
				return fmt.Errorf("%w: text part: %w", ErrMalformed, err)
			}
			p.Report.HumanText = normalizeText(dec)
			haveText = true
		}
	}
	if !found {
		return fmt.Errorf("%w: no message/disposition-notification part", ErrMalformed)
	}
	return p.parseNotification(notification)
}

// parseNotification reads the disposition-notification fields. Blank lines
// between field groups (RFC 3798 per-message and per-recipient fields) are
// skipped; the last group need not end with one.
func (p *Parsed) parseNotification(b []byte) error {
	// A copy (full slice expression), as b may alias the partner's body.
	b = bytes.TrimRight(b, "\r\n")
	b = append(b[:len(b):len(b)], "\r\n\r\n"...)
	for len(b) > 0 {
		e, err := smime.ParseEntity(b)
		if err != nil {
			return fmt.Errorf("%w: disposition-notification fields: %w", ErrMalformed, err)
		}
		for _, f := range e.Header {
			p.Fields.Add(f.Name, unfold(f.Value))
		}
		b = e.Body
	}
	r := &p.Report
	r.ReportingUA = collapseSpace(p.Fields.Get("Reporting-Ua"))
	r.OriginalRecipient = address(p.Fields.Get("Original-Recipient"))
	r.FinalRecipient = address(p.Fields.Get("Final-Recipient"))
	r.OriginalMessageID = strings.TrimSpace(p.Fields.Get("Original-Message-Id"))
	if mic := p.Fields.Get("Received-Content-Mic"); mic != "" {
		r.MIC, r.MICAlg = splitMIC(mic)
	}
	disp := p.Fields.Get("Disposition")
	if disp == "" {
		return fmt.Errorf("%w: no Disposition field", ErrMalformed)
	}
	d, err := ParseDisposition(disp)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	r.Disposition = d
	return nil
}

// address returns the address of an "address-type; address" field
// (Original-Recipient, Final-Recipient); a value without a type is returned
// as is.
func address(v string) string {
	v = strings.TrimSpace(v)
	if typ, addr, ok := strings.Cut(v, ";"); ok && isToken(strings.TrimSpace(typ)) {
		return strings.TrimSpace(addr)
	}
	return v
}

// splitMIC splits "digest, alg" at its last comma; the algorithm is
// returned canonical when known.
func splitMIC(v string) (mic, alg string) {
	v = strings.TrimSpace(v)
	i := strings.LastIndexByte(v, ',')
	if i < 0 {
		return v, ""
	}
	mic = strings.Join(strings.Fields(v[:i]), "")
	alg, _ = CanonicalMICAlg(v[i+1:])
	return mic, alg
}

// normalizeText converts line ends to LF and drops trailing line breaks.
func normalizeText(b []byte) string {
	s := strings.ReplaceAll(string(b), "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return strings.TrimRight(s, "\n")
}

// derLength returns the total length of the definite-length DER SEQUENCE at
// the start of b, when its header is complete and the length fits in b.
func derLength(b []byte) (int, bool) {
	if len(b) < 2 || b[0] != 0x30 {
		return 0, false
	}
	l := int(b[1])
	if l < 0x80 {
		n := 2 + l
		return n, n <= len(b)
	}
	k := l & 0x7f
	if k == 0 || k > 4 || len(b) < 2+k {
		return 0, false // indefinite length or too long to be real
	}
	n := 0
	for _, c := range b[2 : 2+k] {
		n = n<<8 | int(c)
	}
	n += 2 + k
	return n, n <= len(b)
}

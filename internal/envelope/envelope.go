// Package envelope reads the business envelope of an EDI payload: the fields
// that identify an interchange independently of the transport that carried it
// (UN/EDIFACT UNB/UNZ, ASC X12 ISA/IEA, the root of a UBL document, or the
// header of a PEPPOL Standard Business Document).
//
// It is not an EDI parser. It reads only the service segments and header
// elements it needs, checks that the interchange is complete (trailer present
// and matching its header), and never expands XML entities or DTDs.
//
// A partner's EDI system that resends an interchange mints a new transport id
// (AS2 Message-ID, eb:MessageId) but keeps the envelope; Interchange.Key turns
// the envelope into the business dedup key.
package envelope

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"mime"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/edigateway/gateway/dedup"
)

// Standard names, the values of Interchange.Standard.
const (
	StandardEDIFACT    = "edifact"
	StandardX12        = "x12"
	StandardUBL        = "ubl"
	StandardPeppolSBDH = "peppol-sbdh"
)

// KeyTag versions the business key encoding of Interchange.Key. Changing the
// fields, their order or their normalisation requires a new tag, otherwise
// ledgers written by an older gateway would stop matching resends received
// by a newer one.
const KeyTag = "gateway/interchange-key/v1"

// MaxFieldLength is the longest value, in bytes, that Extract accepts for any
// Interchange field. The standards allow far less (EDIFACT an..35, X12 at most
// 15); a longer value means a damaged envelope, and the bound keeps ledger rows
// small whatever a partner sends.
const MaxFieldLength = 512

var (
	// ErrNoEnvelope means the payload is not in a standard this package
	// reads: it has no business key, and only transport dedup applies.
	// Extract returns this value itself, never wrapped.
	ErrNoEnvelope = errors.New("envelope: no business envelope")

	// ErrDamaged means the payload is in a known standard but its envelope is
	// incomplete or inconsistent (truncated header, missing or mismatching
	// trailer, refused XML construct). Errors from Extract wrap it and say
	// what is wrong.
	ErrDamaged = errors.New("envelope: damaged envelope")
)

// Interchange is the business envelope of one payload. All values are as
// found in the envelope, release characters removed (EDIFACT), XML entities
// resolved, and surrounding white space trimmed. Unused fields are empty.
type Interchange struct {
	// Standard is one of StandardEDIFACT, StandardX12, StandardUBL and
	// StandardPeppolSBDH.
	Standard string

	// Sender and SenderQualifier identify the sender: EDIFACT UNB S002
	// 0004 and 0007; X12 ISA06 and ISA05; UBL EndpointID and its schemeID
	// (of cac:AccountingSupplierParty/cac:Party for invoices, see
	// Extract); SBDH Sender/Identifier and its Authority.
	Sender, SenderQualifier string

	// Recipient and RecipientQualifier identify the recipient: EDIFACT UNB
	// S003 0010 and 0007; X12 ISA08 and ISA07; UBL EndpointID and schemeID
	// of the customer party; SBDH Receiver/Identifier and its Authority.
	Recipient, RecipientQualifier string

	// Reference is the interchange reference: EDIFACT UNB 0020, X12 ISA13,
	// UBL cbc:UUID when present else cbc:ID, SBDH
	// DocumentIdentification/InstanceIdentifier.
	Reference string

	// Date and Time are the preparation date and time: EDIFACT S004 0017
	// and 0019, X12 ISA09 and ISA10, UBL cbc:IssueDate and cbc:IssueTime,
	// SBDH CreationDateAndTime (all in Date; Time stays empty).
	Date, Time string

	// Type is the message type: the first EDIFACT UNH S009 0065 (ORDERS,
	// INVOIC), the first X12 ST01 (810, 850; "TA1" for an interchange
	// holding only acknowledgments), the UBL root element name (Invoice,
	// CreditNote, Order), SBDH DocumentIdentification/Type.
	Type string

	// TypeVersion is the version of the message type: EDIFACT S009 0052,
	// 0054, 0051 and 0057 joined with ':' (e.g. "D:96A:UN:EAN008"), X12
	// ST03 or else GS08 of the first group, UBL cbc:UBLVersionID, SBDH
	// TypeVersion.
	TypeVersion string

	// Syntax is the syntax or document standard the envelope declares:
	// EDIFACT S001 0001 and 0002 joined with ':' (e.g. "UNOA:2"), X12
	// ISA12, the UBL root namespace, SBDH DocumentIdentification/Standard.
	Syntax string

	// Test reports a test interchange: EDIFACT UNB 0035 = "1", X12 ISA15 =
	// "T". UBL and SBDH have no such flag.
	Test bool
}

// Key returns the business dedup key of the interchange as received from
// partner (the gateway's configured partner name).
//
// Encoding: dedup.HashFields with tag KeyTag over, in this order: partner,
// Standard, SenderQualifier, Sender, RecipientQualifier, Recipient,
// Reference, date, Type. Each field is length prefixed, so no two different
// field lists share a key. Values are used exactly as Extract returns them.
// Time, TypeVersion, Syntax and Test are not part of the key.
//
// date is Date, which scopes references that senders recycle (EDIFACT 0020,
// the 9-digit X12 ISA13, invoice numbers restarting each year), except for
// StandardPeppolSBDH where it is always empty: a PEPPOL InstanceIdentifier
// is unique forever, so the same identifier with another
// CreationDateAndTime is the same document (a resend or a reuse), never a
// new one.
func (ic *Interchange) Key(partner string) dedup.Key {
	date := ic.Date
	if ic.Standard == StandardPeppolSBDH {
		date = ""
	}
	return dedup.HashFields(KeyTag,
		partner,
		ic.Standard,
		ic.SenderQualifier, ic.Sender,
		ic.RecipientQualifier, ic.Recipient,
		ic.Reference,
		date,
		ic.Type,
	)
}

// Extract reads the business envelope of payload. The standard is detected
// from the content, after an optional UTF-8 byte order mark and leading white
// space, and only from a start that is recognisably a business document:
//
//   - UN/EDIFACT: "UNB" followed by the data element separator of syntax
//     level A ('+') or B (IS3, 0x1D), or a UNA service string advice
//     followed, after white space, by "UNB" (the advice is read by position;
//     without it the syntax level A defaults `:+.? '`, or the level B
//     information separators when UNB is followed by IS3);
//   - ASC X12: "ISA", an element separator (not a letter, digit or white
//     space), ISA01 and the separator again, as in "ISA*00*"; the
//     separators come from the fixed 106-byte ISA;
//   - XML: an XML declaration ("<?xml" and white space), or '<' and a root
//     start tag that parses; a root element in a
//     urn:oasis:names:specification:ubl:schema:xsd: namespace is UBL, a
//     StandardBusinessDocument in the UN/CEFACT SBDH namespace is a PEPPOL
//     SBDH. A payload with an XML declaration that does not parse to a
//     root element (cut inside its declaration, text before the root) is
//     damaged, with standard "xml".
//
// Anything else gives (nil, ErrNoEnvelope): XML with another root, text that
// merely starts with those letters ("UNBOUND", "ISAAC"), and bytes that
// only might be a business document and do not parse as one, such as
// random binary data starting with '<' (no root start tag that parses),
// "UNB" or "ISA": such a payload is opaque (transport dedup only), not
// damaged. ExtractTyped also reads as damaged what the MIME type declares.
// A recognised but damaged envelope gives an error wrapping ErrDamaged
// whose text names the standard and the problem, e.g.
// `edifact: UNZ 0020 "X" does not match UNB 0020 "Y"`.
//
// Checks that make an envelope damaged: EDIFACT UNA separators that are
// letters, digits or not distinct; UNB without sender, recipient, date, time
// or reference; no UNH; UNZ missing or its 0020 differing from UNB 0020; X12
// ISA shorter than 106 bytes, separators not at their fixed positions or not
// distinct; no ST (or TA1); IEA missing or IEA02 differing from ISA13; for
// both, a segment left unterminated (except a last X12 segment whose
// newline terminator was stripped), a service segment longer than
// MaxSegmentLength, and anything but white space after the trailer: one
// payload carries one interchange. UBL and SBDH: malformed or
// truncated XML, a DOCTYPE (refused; an XML payload of another kind with a
// DOCTYPE is simply ErrNoEnvelope), an encoding other than UTF-8, US-ASCII or
// ISO-8859-1, nesting deeper than 64, markup (a tag, comment, processing
// instruction or declaration) longer than 1 MiB, a key element twice
// or containing elements, no cbc:UUID/cbc:ID or no InstanceIdentifier, and a
// UBL root element that is not the document element of its namespace. Any
// field longer than MaxFieldLength is damaged too.
//
// UBL values are read only from the root's direct children (and the party
// paths below), matched by namespace URI whatever the prefix.
// UBL party identifiers are read per document type: supplier to customer
// (cac:AccountingSupplierParty to cac:AccountingCustomerParty) by default;
// Order, OrderChange and OrderCancellation from cac:BuyerCustomerParty to
// cac:SellerSupplierParty; OrderResponse and OrderResponseSimple the other
// way round; DespatchAdvice from cac:DespatchSupplierParty to
// cac:DeliveryCustomerParty; ReceiptAdvice the other way round;
// ApplicationResponse from cac:SenderParty to cac:ReceiverParty.
//
// Extract does not modify payload and keeps no reference to it. It is
// ExtractReader over the bytes of payload.
func Extract(payload []byte) (*Interchange, error) {
	return ExtractReader(bytes.NewReader(payload))
}

// ExtractReader is Extract reading the payload from r, in one pass and in
// memory that does not depend on the payload's size: EDIFACT and X12 are
// read segment by segment (service segments, which are all this package
// reads, may be at most MaxSegmentLength bytes long; other segments of any
// length are skipped without being kept), and XML is decoded with every run
// of character data, CDATA section, comment and processing instruction cut
// to xmlRunBound bytes, which no value read here comes near. r is read to
// its end when the envelope is complete (to check nothing follows the
// trailer); an error reading r is returned wrapped, and is not ErrDamaged.
func ExtractReader(r io.Reader) (*Interchange, error) {
	s, err := start(r)
	defer s.release()
	if err != nil {
		return nil, err
	}
	return s.extract(declaredNothing)
}

// payloadStart is a payload positioned after its byte order mark and white
// space, with what ExtractTyped needs to know about its beginning.
type payloadStart struct {
	br    *bufio.Reader
	utf16 bool // starts with a UTF-16 byte order mark
	empty bool // nothing but a byte order mark and white space
	first byte // first byte after them
}

// readers holds the buffered readers of start between payloads: a 64 KiB
// buffer made per payload was a large part of what a message allocated.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufferSize) }}

// start reads the payload's beginning. The caller must call release on the
// result (also when err is not nil) once it no longer reads the payload.
func start(r io.Reader) (*payloadStart, error) {
	br := readers.Get().(*bufio.Reader)
	br.Reset(r)
	s := &payloadStart{br: br}
	head, err := br.Peek(3)
	if err != nil && err != io.EOF {
		return s, readErr(err)
	}
	s.utf16 = bytes.HasPrefix(head, []byte{0xfe, 0xff}) || bytes.HasPrefix(head, []byte{0xff, 0xfe})
	if bytes.Equal(head, []byte("\xef\xbb\xbf")) {
		br.Discard(3)
	}
	for {
		b, err := br.ReadByte()
		if err == io.EOF {
			s.empty = true
			return s, nil
		}
		if err != nil {
			return s, readErr(err)
		}
		if b != ' ' && b != '\t' && b != '\r' && b != '\n' {
			br.UnreadByte()
			s.first = b
			return s, nil
		}
	}
}

// release gives the buffered reader back for the next payload; s must not
// be read from afterwards.
func (s *payloadStart) release() {
	if s == nil || s.br == nil {
		return
	}
	s.br.Reset(nil) // no reference to the payload's reader is kept
	readers.Put(s.br)
	s.br = nil
}

// readBufferSize is the buffer through which payloads are read.
const readBufferSize = 64 << 10

func readErr(err error) error { return fmt.Errorf("envelope: read payload: %w", err) }

// hasTag reports whether the payload continues with the segment tag
// followed by something that can be a separator (or nothing: a truncated
// envelope), so that plain text such as "UNBOUND" or "ISAAC" is not taken
// for EDI.
func (s *payloadStart) hasTag(tag string) bool {
	data, _ := s.br.Peek(len(tag) + 1)
	if !bytes.HasPrefix(data, []byte(tag)) {
		return false
	}
	return len(data) == len(tag) || !isAlnum(data[len(tag)])
}

func (s *payloadStart) extract(decl declared) (*Interchange, error) {
	var (
		ic  *Interchange
		err error
	)
	switch {
	case s.empty:
		return nil, ErrNoEnvelope
	case s.hasTag("UNA") || s.hasTag("UNB"):
		if ok, err := s.startsEDIFACT(); err != nil || !ok && decl != declaredEDI {
			return nil, orNoEnvelope(err)
		}
		ic, err = extractEDIFACT(s.br)
	case s.hasTag("ISA"):
		if ok, err := s.startsX12(); err != nil || !ok && decl != declaredEDI {
			return nil, orNoEnvelope(err)
		}
		ic, err = extractX12(s.br)
	case s.first == '<':
		withDeclaration, perr := s.startsXMLDeclaration()
		if perr != nil {
			return nil, perr
		}
		ic, err = extractXML(s.br, decl == declaredXML || withDeclaration)
	default:
		return nil, ErrNoEnvelope
	}
	if err != nil {
		return nil, err
	}
	if err := ic.checkLengths(); err != nil {
		return nil, err
	}
	return ic, nil
}

// declared is what a payload's MIME type says it is.
type declared int

const (
	declaredNothing declared = iota // no type, or one that names no business document (application/octet-stream, text/plain)
	declaredXML                     // application/xml, text/xml, */*+xml
	declaredEDI                     // application/EDIFACT, application/EDI-X12 (RFC 1767)
)

func declaredBy(contentType string) declared {
	switch mt := mediaType(contentType); {
	case isXMLType(contentType):
		return declaredXML
	case mt == "application/edifact" || mt == "application/edi-x12":
		return declaredEDI
	}
	return declaredNothing
}

// Recognisable starts. A payload whose type does not declare a business
// document is read as one only when it recognisably starts as one; bytes
// that merely might (random binary data beginning with '<', "UNB" or "ISA")
// are an opaque payload, not a damaged envelope.

// startsEDIFACT reports whether the payload starts as an EDIFACT
// interchange: "UNB" followed by the data element separator of syntax level
// A ('+') or B (IS3, 0x1D), or a UNA service string advice (any six bytes)
// followed, after at most maxSpaceAfterUNA bytes of white space, by "UNB".
func (s *payloadStart) startsEDIFACT() (bool, error) {
	head, err := s.peek(9 + maxSpaceAfterUNA + 3)
	if err != nil {
		return false, err
	}
	if bytes.HasPrefix(head, []byte("UNB")) {
		return len(head) > 3 && (head[3] == edifactLevelA.element || head[3] == edifactLevelB.element), nil
	}
	if len(head) < 9 {
		return false, nil
	}
	rest := head[9:]
	for len(rest) > 0 && isSpace(rest[0]) {
		rest = rest[1:]
	}
	return bytes.HasPrefix(rest, []byte("UNB")), nil
}

// maxSpaceAfterUNA is the most white space between a UNA and the "UNB"
// that makes it recognisable (a CR LF, or a few lines of them, in practice).
const maxSpaceAfterUNA = 16

// startsX12 reports whether the payload starts as an X12 interchange:
// "ISA", an element separator that is neither a letter, a digit nor white
// space, the two bytes of ISA01 and the same separator again ("ISA*00*").
func (s *payloadStart) startsX12() (bool, error) {
	head, err := s.peek(7)
	return len(head) == 7 && !isAlnum(head[3]) && !isSpace(head[3]) && head[6] == head[3], err
}

// startsXMLDeclaration reports whether the payload starts with an XML
// declaration ("<?xml" and white space). Without one (and without an XML
// MIME type) a payload starting with '<' is XML only if its root start tag
// parses (extractXML).
func (s *payloadStart) startsXMLDeclaration() (bool, error) {
	head, err := s.peek(6)
	return len(head) == 6 && bytes.HasPrefix(head, []byte("<?xml")) && isSpace(head[5]), err
}

// peek returns up to the next n bytes without consuming them: fewer at the
// end of the payload; an error reading it is returned (wrapped, not
// ErrDamaged).
func (s *payloadStart) peek(n int) ([]byte, error) {
	head, err := s.br.Peek(n)
	if err != nil && err != io.EOF {
		return head, readErr(err)
	}
	return head, nil
}

// orNoEnvelope is err, or ErrNoEnvelope when err is nil.
func orNoEnvelope(err error) error {
	if err != nil {
		return err
	}
	return ErrNoEnvelope
}

// standardXML names, in damaged-envelope errors, XML that does not parse
// far enough to tell which standard it is in.
const standardXML = "xml"

// ExtractTyped is Extract for a payload whose MIME type is known. A payload
// declared XML (application/xml, text/xml or any type with the +xml suffix,
// RFC 7303) must be XML: if it is empty, starts with neither an XML
// declaration nor an element (after a UTF-8 byte order mark and white
// space), or starts with '<' but does not parse to a root element, it is
// damaged, with standard "xml". A UTF-16 payload (byte order mark FE FF or
// FF FE) is not read and gives ErrNoEnvelope. A payload declared EDI
// (application/EDIFACT, application/EDI-X12) that starts with the tag "UNA",
// "UNB" or "ISA" and a byte that is not a letter or digit is read as
// EDIFACT or X12 even when its start is not otherwise recognisable (e.g.
// "UNB:"), and is damaged if it does not parse. Otherwise the type does not
// matter: the content decides, as for Extract (application/octet-stream,
// text/plain and any other type). It is ExtractTypedReader over the bytes of
// payload.
func ExtractTyped(contentType string, payload []byte) (*Interchange, error) {
	return ExtractTypedReader(contentType, bytes.NewReader(payload))
}

// ExtractTypedReader is ExtractTyped reading the payload from r, as
// ExtractReader does.
func ExtractTypedReader(contentType string, r io.Reader) (*Interchange, error) {
	s, err := start(r)
	defer s.release()
	if err != nil {
		return nil, err
	}
	decl := declaredBy(contentType)
	ic, err := s.extract(decl)
	if err != ErrNoEnvelope || decl != declaredXML || s.utf16 {
		return ic, err
	}
	mt := mediaType(contentType)
	switch {
	case s.empty:
		return nil, damagedf(standardXML, "the payload is declared %s but is empty", mt)
	case s.first != '<':
		return nil, damagedf(standardXML, "the payload is declared %s but does not start with an XML declaration or element", mt)
	}
	return nil, ErrNoEnvelope // XML with a root that is no business document
}

// mediaType is the lower-case type/subtype of a Content-Type value.
func mediaType(contentType string) string {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		mt, _, _ = strings.Cut(contentType, ";")
		mt = strings.ToLower(strings.TrimSpace(mt))
	}
	return mt
}

func isXMLType(contentType string) bool {
	mt := mediaType(contentType)
	return mt == "application/xml" || mt == "text/xml" || strings.HasSuffix(mt, "+xml") && strings.Contains(mt, "/")
}

// Reason is the text of an Extract or ExtractTyped error for the sending
// partner: the standard by its name (EDIFACT, X12, UBL, PEPPOL SBDH, XML)
// and the problem as Error gives it, but without the text of an underlying
// decoder error (an XML syntax error becomes its line number), e.g.
// `EDIFACT: UNZ 0020 "X" does not match UNB 0020 "Y"` or `XML: malformed XML
// before the root element (line 2)`. Errors that are not damaged envelopes
// give a generic sentence.
func Reason(err error) string {
	var d *damagedError
	if !errors.As(err, &d) {
		return "the business envelope could not be read"
	}
	msg := standardName(d.standard) + ": " + d.problem
	var ml *markupTooLongError
	if errors.As(d.err, &ml) {
		return msg + ": " + ml.Error()
	}
	var se *xml.SyntaxError
	if errors.As(d.err, &se) {
		return fmt.Sprintf("%s (line %d)", msg, se.Line)
	}
	return msg
}

// standardName is how partners are told the standard of a damaged
// envelope: its usual name, not the lower-case label of the error text.
func standardName(standard string) string {
	switch standard {
	case StandardEDIFACT:
		return "EDIFACT"
	case StandardX12:
		return "X12"
	case StandardUBL:
		return "UBL"
	case StandardPeppolSBDH, "sbdh":
		return "PEPPOL SBDH"
	case standardXML:
		return "XML"
	}
	return standard
}

func isAlnum(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z'
}

// quoteByte formats a separator byte for messages: 'x' for ASCII, '\xNN'
// otherwise (a byte, not a character, in any encoding).
func quoteByte(b byte) string {
	if b < utf8.RuneSelf {
		return strconv.QuoteRune(rune(b))
	}
	return fmt.Sprintf(`'\x%02x'`, b)
}

func (ic *Interchange) checkLengths() error {
	fields := []struct{ name, v string }{
		{"sender", ic.Sender}, {"sender qualifier", ic.SenderQualifier},
		{"recipient", ic.Recipient}, {"recipient qualifier", ic.RecipientQualifier},
		{"reference", ic.Reference}, {"date", ic.Date}, {"time", ic.Time},
		{"type", ic.Type}, {"type version", ic.TypeVersion}, {"syntax", ic.Syntax},
	}
	for _, f := range fields {
		if len(f.v) > MaxFieldLength {
			return damagedf(ic.Standard, "%s is %d bytes long, more than %d", f.name, len(f.v), MaxFieldLength)
		}
	}
	return nil
}

// damagedError is a damaged envelope: its text names the standard and the
// problem; errors.Is(err, ErrDamaged) holds, and Unwrap gives the underlying
// error if any (an XML syntax error, for example).
type damagedError struct {
	standard string // the label of Error's text: edifact, x12, ubl, sbdh or xml
	problem  string
	err      error
}

func (e *damagedError) Error() string {
	msg := e.standard + ": " + e.problem
	if e.err != nil {
		return msg + ": " + clip(e.err.Error(), 2*maxQuoted)
	}
	return msg
}

// maxQuoted bounds partner-controlled text quoted in an error message.
const maxQuoted = 80

// clip shortens s to at most n bytes followed by "...".
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func (e *damagedError) Is(target error) bool { return target == ErrDamaged }
func (e *damagedError) Unwrap() error        { return e.err }

// damagedf returns a damaged envelope error; string arguments (partner
// values) are clipped to maxQuoted bytes.
func damagedf(standard, format string, args ...any) error {
	return damagedWrap(standard, nil, format, args...)
}

func damagedWrap(standard string, err error, format string, args ...any) error {
	for i, a := range args {
		if s, ok := a.(string); ok {
			args[i] = clip(s, maxQuoted)
		}
	}
	return &damagedError{standard: standard, problem: fmt.Sprintf(format, args...), err: err}
}

package mdn

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"

	"github.com/edigateway/gateway/dedup"
)

// Report is the content of an AS2 MDN.
//
// ReportingUA .. Disposition are the fields of the
// message/disposition-notification part; HumanText is the text/plain part.
// AS2From, AS2To and MessageID are the MDN's own transport headers (the
// HTTP headers of a sync or async MDN); they are not part of the signed
// entity. For an MDN we send, AS2From is our AS2 id and AS2To the partner's.
type Report struct {
	ReportingUA       string // Reporting-UA, e.g. "gateway"
	OriginalRecipient string // address of Original-Recipient: rfc822; <address>
	FinalRecipient    string // address of Final-Recipient: rfc822; <address>
	OriginalMessageID string // Message-ID of the message this MDN answers, as received
	MIC               string // base64 digest of Received-Content-MIC
	MICAlg            string // algorithm of Received-Content-MIC, e.g. "sha-256"
	Disposition       Disposition
	HumanText         string // text/plain part; line ends are normalised

	AS2From   string
	AS2To     string
	MessageID string
}

// ReportType is the media type of an MDN body.
const ReportType = "multipart/report"

// Build returns the MDN as a multipart/report; report-type=
// disposition-notification entity, split into its Content-Type header value
// and its body. Lines end in CRLF and the boundary is random. Use BuildEntity
// to get the entity bytes that a signed MDN signs.
//
// Empty fields are omitted, except Final-Recipient, which falls back to
// AS2From, and Disposition, whose empty parts default to
// automatic-action/MDN-sent-automatically; processed. An empty HumanText is
// replaced by a sentence derived from the disposition. CR, LF and other
// control characters in field values are replaced by spaces, so that partner
// supplied values (a Message-ID) cannot inject fields.
func Build(r Report) (contentType string, body []byte) {
	text := humanText(r)
	fields := notificationFields(r)
	var boundary string
	for {
		boundary = newBoundary()
		if !bytes.Contains(text, []byte(boundary)) && !bytes.Contains(fields, []byte(boundary)) {
			break
		}
	}
	contentType = `multipart/report; report-type=disposition-notification; boundary="` + boundary + `"`

	textCTE := "7bit"
	charset := "us-ascii"
	if !isASCII(text) {
		textCTE, charset = "8bit", "utf-8"
	}
	var b bytes.Buffer
	b.WriteString("--" + boundary + "\r\n")
	b.WriteString("Content-Type: text/plain; charset=" + charset + "\r\n")
	b.WriteString("Content-Transfer-Encoding: " + textCTE + "\r\n\r\n")
	b.Write(text)
	b.WriteString("\r\n--" + boundary + "\r\n")
	b.WriteString("Content-Type: message/disposition-notification\r\n")
	b.WriteString("Content-Transfer-Encoding: 7bit\r\n\r\n")
	b.Write(fields)
	b.WriteString("\r\n--" + boundary + "--\r\n")
	return contentType, b.Bytes()
}

// BuildEntity returns the MDN as one MIME entity: its Content-Type header
// line, an empty line and the body of Build. These are the bytes that Sign
// signs and that a partner's MIC-style verification covers.
func BuildEntity(r Report) []byte {
	ct, body := Build(r)
	return joinEntity(ct, body)
}

func joinEntity(contentType string, body []byte) []byte {
	out := make([]byte, 0, len(contentType)+len(body)+20)
	out = append(out, "Content-Type: "...)
	out = append(out, contentType...)
	out = append(out, "\r\n\r\n"...)
	return append(out, body...)
}

// notificationFields renders the message/disposition-notification content,
// one CRLF-terminated line per field.
func notificationFields(r Report) []byte {
	var b bytes.Buffer
	field := func(name, value string) {
		value = sanitize(value)
		if value == "" {
			return
		}
		b.WriteString(name + ": " + value + "\r\n")
	}
	field("Reporting-UA", r.ReportingUA)
	if v := sanitize(r.OriginalRecipient); v != "" {
		field("Original-Recipient", "rfc822; "+v)
	}
	final := sanitize(r.FinalRecipient)
	if final == "" {
		final = sanitize(r.AS2From)
	}
	if final != "" {
		field("Final-Recipient", "rfc822; "+final)
	}
	field("Original-Message-ID", r.OriginalMessageID)
	if mic := sanitize(r.MIC); mic != "" {
		alg := sanitize(r.MICAlg)
		if alg == "" {
			field("Received-Content-MIC", mic)
		} else {
			field("Received-Content-MIC", mic+", "+alg)
		}
	}
	field("Disposition", r.Disposition.String())
	return b.Bytes()
}

// humanText returns the text/plain content with CRLF line ends and without
// trailing line breaks.
func humanText(r Report) []byte {
	t := r.HumanText
	if strings.TrimSpace(t) == "" {
		t = defaultText(r)
	}
	t = strings.ReplaceAll(t, "\r\n", "\n")
	t = strings.ReplaceAll(t, "\r", "\n")
	t = strings.TrimRight(t, "\n")
	return []byte(strings.ReplaceAll(t, "\n", "\r\n"))
}

func defaultText(r Report) string {
	id := sanitize(r.OriginalMessageID)
	if id == "" {
		id = "(no Message-ID)"
	}
	d := r.Disposition
	switch {
	case d.IsWarning():
		return "The AS2 message " + id + " has been received with a warning: " + orDefault(sanitize(d.Description), "warning") + "."
	case d.IsProcessed():
		return "The AS2 message " + id + " has been received and processed."
	default:
		return "The AS2 message " + id + " could not be processed: " + orDefault(sanitize(d.Description), d.Type) + "."
	}
}

// Sign wraps a MIME entity (BuildEntity's bytes) into multipart/signed;
// protocol="application/pkcs7-signature"; micalg=<micalg>. sign receives the
// exact entity bytes and returns a detached CMS SignedData in DER; the
// signature part carries it in base64 with 76-character CRLF lines. micalg
// is written as given (e.g. "sha-256"); it must be a token.
func Sign(entity []byte, micalg string, sign func(content []byte) (sigDER []byte, err error)) (contentType string, body []byte, err error) {
	if micalg == "" || !isToken(micalg) {
		return "", nil, fmt.Errorf("mdn: sign: invalid micalg %q", micalg)
	}
	if len(entity) == 0 {
		return "", nil, fmt.Errorf("mdn: sign: empty entity")
	}
	sig, err := sign(entity)
	if err != nil {
		return "", nil, fmt.Errorf("mdn: sign: %w", err)
	}
	if len(sig) == 0 {
		return "", nil, fmt.Errorf("mdn: sign: signer returned an empty signature")
	}
	var boundary string
	for {
		boundary = newBoundary()
		if !bytes.Contains(entity, []byte(boundary)) {
			break
		}
	}
	contentType = `multipart/signed; protocol="application/pkcs7-signature"; micalg=` + micalg + `; boundary="` + boundary + `"`
	var b bytes.Buffer
	b.Grow(len(entity) + len(sig)*4/3 + 400)
	b.WriteString("--" + boundary + "\r\n")
	b.Write(entity)
	b.WriteString("\r\n--" + boundary + "\r\n")
	b.WriteString("Content-Type: application/pkcs7-signature; name=smime.p7s\r\n")
	b.WriteString("Content-Transfer-Encoding: base64\r\n")
	b.WriteString("Content-Disposition: attachment; filename=\"smime.p7s\"\r\n\r\n")
	writeBase64Lines(&b, sig)
	b.WriteString("--" + boundary + "--\r\n")
	return contentType, b.Bytes(), nil
}

// writeBase64Lines writes base64 of data in lines of 76 characters, each
// ending in CRLF.
func writeBase64Lines(b *bytes.Buffer, data []byte) {
	enc := base64.StdEncoding.EncodeToString(data)
	for len(enc) > 76 {
		b.WriteString(enc[:76])
		b.WriteString("\r\n")
		enc = enc[76:]
	}
	b.WriteString(enc)
	b.WriteString("\r\n")
}

// Headers returns the transport headers of an MDN we send: AS2-Version,
// AS2-From, AS2-To (quoted when they are not atoms, RFC 4130 §6.2),
// Message-ID and Mime-Version. Empty values are left out. The caller adds
// Content-Type from Build or Sign.
func (r Report) Headers() http.Header {
	h := http.Header{}
	h.Set("Mime-Version", "1.0")
	h.Set("AS2-Version", "1.2")
	if v := sanitize(r.AS2From); v != "" {
		h.Set("AS2-From", quoteAS2ID(v))
	}
	if v := sanitize(r.AS2To); v != "" {
		h.Set("AS2-To", quoteAS2ID(v))
	}
	if v := sanitize(r.MessageID); v != "" {
		h.Set("Message-Id", v)
	}
	return h
}

// MICEquals reports whether the report's Received-Content-MIC equals mic
// computed with alg: the digests compare byte for byte after base64
// decoding and the algorithm names are equal after CanonicalMICAlg.
func (r Report) MICEquals(mic, alg string) bool {
	a, ok1 := CanonicalMICAlg(r.MICAlg)
	b, ok2 := CanonicalMICAlg(alg)
	if !ok1 || !ok2 || a != b {
		return false
	}
	x, err1 := decodeBase64([]byte(r.MIC))
	y, err2 := decodeBase64([]byte(mic))
	return err1 == nil && err2 == nil && len(x) > 0 && bytes.Equal(x, y)
}

// SameMessageID reports whether two Message-IDs name the same message:
// equal after removing white space and one pair of angle brackets.
func SameMessageID(a, b string) bool {
	a, b = dedup.NormalizeMessageID(a), dedup.NormalizeMessageID(b)
	return a != "" && a == b
}

var micAlgs = map[string]string{
	"md5":     "md5",
	"sha1":    "sha-1",
	"sha-1":   "sha-1",
	"sha224":  "sha-224",
	"sha-224": "sha-224",
	"sha256":  "sha-256",
	"sha-256": "sha-256",
	"sha384":  "sha-384",
	"sha-384": "sha-384",
	"sha512":  "sha-512",
	"sha-512": "sha-512",
}

var micHashes = map[string]crypto.Hash{
	"md5":     crypto.MD5,
	"sha-1":   crypto.SHA1,
	"sha-224": crypto.SHA224,
	"sha-256": crypto.SHA256,
	"sha-384": crypto.SHA384,
	"sha-512": crypto.SHA512,
}

// CanonicalMICAlg maps a MIC algorithm name as partners write it ("sha256",
// "SHA-256", "sha1") to the RFC 5751 spelling ("sha-256", "sha-1"). ok is
// false for an unknown name, which is then returned lower-cased.
func CanonicalMICAlg(name string) (canonical string, ok bool) {
	n := strings.ToLower(strings.TrimSpace(name))
	if c, found := micAlgs[n]; found {
		return c, true
	}
	return n, false
}

// MICHash returns the hash function of a MIC algorithm name in any spelling
// CanonicalMICAlg accepts.
func MICHash(name string) (crypto.Hash, bool) {
	c, ok := CanonicalMICAlg(name)
	if !ok {
		return 0, false
	}
	h, ok := micHashes[c]
	return h, ok
}

// newBoundary returns a fresh random multipart boundary. Tests replace it.
var newBoundary = func() string {
	var b [18]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "----=_MDN_" + hex.EncodeToString(b[:])
}

// sanitize makes s safe as a header field value: control characters
// (including CR and LF) become spaces and the result is trimmed.
func sanitize(s string) string {
	if !strings.ContainsFunc(s, isControl) {
		return strings.TrimSpace(s)
	}
	return strings.TrimSpace(strings.Map(func(r rune) rune {
		if isControl(r) {
			return ' '
		}
		return r
	}, s))
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// isToken reports whether s is an RFC 2045 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`()<>@,;:\"/[]?=`, c) >= 0 {
			return false
		}
	}
	return true
}

// quoteAS2ID writes an AS2 name as an atom when it is one and as a quoted
// string otherwise (RFC 4130 §6.2).
func quoteAS2ID(id string) string {
	atom := true
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`()<>@,;:\"/[]?={}`, c) >= 0 {
			atom = false
			break
		}
	}
	if atom {
		return id
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(id) + `"`
}

// unquoteAS2ID undoes quoteAS2ID; an unquoted value is returned trimmed.
func unquoteAS2ID(v string) string {
	v = strings.TrimSpace(v)
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return v
	}
	v = v[1 : len(v)-1]
	var sb strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		sb.WriteByte(v[i])
	}
	return sb.String()
}

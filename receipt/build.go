// Package receipt builds and reads AS4 signal messages: receipts carrying
// ebbp:NonRepudiationInformation, and ebMS error signals. It builds unsigned
// documents; the caller signs them (WS-Security) before sending.
package receipt

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/as4"
)

// NSExcC14N is the exclusive canonicalisation namespace, which also names
// the ec:InclusiveNamespaces element.
const NSExcC14N = "http://www.w3.org/2001/10/xml-exc-c14n#"

// Transform is one ds:Transform of a reference.
type Transform struct {
	Algorithm string
	// PrefixList is the ec:InclusiveNamespaces PrefixList of an exclusive
	// c14n transform, "" when there is none.
	PrefixList string
}

// Reference is one ds:Reference of a signed message, as listed in an
// ebbp:MessagePartNRInformation.
type Reference struct {
	URI          string
	DigestMethod string
	// DigestValue is the base64 digest text.
	DigestValue string
	Transforms  []Transform
}

// Options make the builders deterministic and name the gateway.
type Options struct {
	// Now is the clock (default time.Now).
	Now func() time.Time
	// NewID returns a fresh token of letters, digits, '.', '_' or '-'
	// (default: a random UUID). It is called once per document: the
	// eb:MessageId is token@Host and the wsu:Ids derive from it.
	NewID func() string
	// Host is the domain part of the eb:MessageId (default "gateway").
	Host string
}

// Signal is a built signal message, unsigned.
type Signal struct {
	// Doc is the SOAP 1.2 envelope.
	Doc *etree.Document
	// MessageID is the eb:MessageId of the signal.
	MessageID string
	// MessagingID and BodyID are the wsu:Id values of eb:Messaging and
	// soap:Body, for the signer to reference.
	MessagingID string
	BodyID      string
}

// BuildReceipt returns an unsigned AS4 receipt for um: a SOAP 1.2 envelope
// whose eb:Messaging/eb:SignalMessage has a new MessageInfo (RefToMessageId
// = um's eb:MessageId) and an eb:Receipt. With refs (the ds:References of
// the signature that covered um) the receipt holds
// ebbp:NonRepudiationInformation with one ebbp:MessagePartNRInformation per
// reference, in the form phase4 uses. Without refs (an unsigned message) it
// holds a copy of the eb:UserMessage element, as the AS4 profile's
// reception awareness asks.
func BuildReceipt(um *as4.UserMessage, refs []Reference, opts Options) (*Signal, error) {
	if um == nil || um.MessageInfo.MessageID == "" {
		return nil, errors.New("receipt: build: user message without eb:MessageId")
	}
	if len(refs) == 0 && um.Element == nil {
		return nil, errors.New("receipt: build: no references and no eb:UserMessage element to acknowledge")
	}
	for i, r := range refs {
		if r.DigestMethod == "" || r.DigestValue == "" {
			return nil, fmt.Errorf("receipt: build: reference %d (%q) lacks digest method or value", i, r.URI)
		}
	}
	s, signal, err := newSignal(um.MessageInfo.MessageID, opts)
	if err != nil {
		return nil, err
	}
	rc := signal.CreateElement("eb:Receipt")
	if len(refs) == 0 {
		rc.AddChild(copyWithNamespaces(um.Element))
		return s, nil
	}
	nri := rc.CreateElement("ebbp:NonRepudiationInformation")
	for _, r := range refs {
		ref := nri.CreateElement("ebbp:MessagePartNRInformation").CreateElement("ds:Reference")
		ref.CreateAttr("URI", r.URI)
		if len(r.Transforms) > 0 {
			ts := ref.CreateElement("ds:Transforms")
			for _, t := range r.Transforms {
				te := ts.CreateElement("ds:Transform")
				te.CreateAttr("Algorithm", t.Algorithm)
				if t.PrefixList != "" {
					in := te.CreateElement("ec:InclusiveNamespaces")
					in.CreateAttr("xmlns:ec", NSExcC14N)
					in.CreateAttr("PrefixList", t.PrefixList)
				}
			}
		}
		ref.CreateElement("ds:DigestMethod").CreateAttr("Algorithm", r.DigestMethod)
		ref.CreateElement("ds:DigestValue").SetText(r.DigestValue)
	}
	return s, nil
}

// BuildError returns an unsigned ebMS error signal: a SOAP 1.2 envelope
// whose eb:SignalMessage lists one eb:Error per entry of errs, with
// errorCode, severity, shortDescription, category, refToMessageInError
// (the error's RefToMessageID, else refToMessageID), eb:Description
// (xml:lang="en") and eb:ErrorDetail. The internal cause (Err) is never
// written. MessageInfo/RefToMessageId is refToMessageID when not empty.
func BuildError(errs []*as4.Error, refToMessageID string, opts Options) (*Signal, error) {
	if len(errs) == 0 {
		return nil, errors.New("receipt: build error signal: no errors")
	}
	s, signal, err := newSignal(refToMessageID, opts)
	if err != nil {
		return nil, err
	}
	for i, e := range errs {
		if e == nil || e.Code == "" || e.Severity == "" {
			return nil, fmt.Errorf("receipt: build error signal: error %d lacks code or severity", i)
		}
		el := signal.CreateElement("eb:Error")
		el.CreateAttr("errorCode", e.Code)
		el.CreateAttr("severity", e.Severity)
		if e.ShortDescription != "" {
			el.CreateAttr("shortDescription", e.ShortDescription)
		}
		if e.Category != "" {
			el.CreateAttr("category", e.Category)
		}
		ref := e.RefToMessageID
		if ref == "" {
			ref = refToMessageID
		}
		if ref != "" {
			el.CreateAttr("refToMessageInError", ref)
		}
		if e.Origin != "" {
			el.CreateAttr("origin", e.Origin)
		}
		if e.Description != "" {
			d := el.CreateElement("eb:Description")
			d.CreateAttr("xml:lang", "en")
			d.SetText(e.Description)
		}
		if e.Detail != "" {
			el.CreateElement("eb:ErrorDetail").SetText(e.Detail)
		}
	}
	return s, nil
}

// newSignal creates the envelope, eb:Messaging and eb:SignalMessage with
// its MessageInfo.
func newSignal(refTo string, opts Options) (*Signal, *etree.Element, error) {
	now, newID, host := opts.Now, opts.NewID, opts.Host
	if now == nil {
		now = time.Now
	}
	if newID == nil {
		newID = randomUUID
	}
	if host == "" {
		host = "gateway"
	}
	token := newID()
	if !validToken(token) {
		return nil, nil, fmt.Errorf("receipt: id generator returned %q (want letters, digits, '.', '_', '-')", token)
	}
	s := &Signal{
		MessageID:   token + "@" + host,
		MessagingID: "msg-" + token,
		BodyID:      "body-" + token,
	}
	doc := etree.NewDocument()
	doc.CreateProcInst("xml", `version="1.0" encoding="UTF-8"`)
	envEl := doc.CreateElement("S12:Envelope")
	envEl.CreateAttr("xmlns:S12", as4.NSSOAP12)
	header := envEl.CreateElement("S12:Header")
	m := header.CreateElement("eb:Messaging")
	m.CreateAttr("xmlns:eb", as4.NSEbMS)
	m.CreateAttr("xmlns:ebbp", as4.NSEbbp)
	m.CreateAttr("xmlns:ds", as4.NSDSig)
	m.CreateAttr("xmlns:wsu", as4.NSWSU)
	m.CreateAttr("S12:mustUnderstand", "true")
	m.CreateAttr("wsu:Id", s.MessagingID)
	signal := m.CreateElement("eb:SignalMessage")
	mi := signal.CreateElement("eb:MessageInfo")
	mi.CreateElement("eb:Timestamp").SetText(now().UTC().Format("2006-01-02T15:04:05.000Z"))
	mi.CreateElement("eb:MessageId").SetText(s.MessageID)
	if refTo != "" {
		mi.CreateElement("eb:RefToMessageId").SetText(refTo)
	}
	body := envEl.CreateElement("S12:Body")
	body.CreateAttr("xmlns:wsu", as4.NSWSU)
	body.CreateAttr("wsu:Id", s.BodyID)
	s.Doc = doc
	return s, signal, nil
}

func validToken(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// randomUUID returns a version 4 UUID.
func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (Go 1.24+ crashes the program instead)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// copyWithNamespaces copies el and declares on the copy the namespaces in
// scope at el whose prefixes the copied subtree uses (as exclusive
// canonicalisation would), so that the copy means the same in its new place.
func copyWithNamespaces(el *etree.Element) *etree.Element {
	c := el.Copy()
	used := map[string]bool{}
	var walk func(e *etree.Element)
	walk = func(e *etree.Element) {
		used[e.Space] = true
		for _, a := range e.Attr {
			if a.Space != "" && a.Space != "xmlns" && a.Space != "xml" {
				used[a.Space] = true
			}
		}
		for _, k := range e.ChildElements() {
			walk(k)
		}
	}
	walk(c)
	declared := map[string]bool{}
	for _, a := range c.Attr {
		if a.Space == "xmlns" {
			declared[a.Key] = true
		} else if a.Space == "" && a.Key == "xmlns" {
			declared[""] = true
		}
	}
	for p := el.Parent(); p != nil; p = p.Parent() {
		for _, a := range p.Attr {
			switch {
			case a.Space == "xmlns" && used[a.Key] && !declared[a.Key]:
				declared[a.Key] = true
				c.CreateAttr("xmlns:"+a.Key, a.Value)
			case a.Space == "" && a.Key == "xmlns" && used[""] && !declared[""]:
				declared[""] = true
				c.CreateAttr("xmlns", a.Value)
			}
		}
	}
	return c
}

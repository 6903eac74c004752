package as4

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/beevik/etree"
)

// Values of ebMS 3.0 Core §5.2.2.9 that mark a test message: such a message
// is acknowledged but never delivered to the business application.
const (
	TestService = "http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/service"
	TestAction  = "http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/test"
)

// Well-known part property names (eb:PartProperties/eb:Property/@name).
const (
	PropMimeType        = "MimeType"
	PropCharacterSet    = "CharacterSet"
	PropCompressionType = "CompressionType"
)

// Messaging is a parsed eb:Messaging header.
type Messaging struct {
	// Element is the eb:Messaging element the model was read from.
	Element *etree.Element
	// UserMessage is the user message unit, nil for signal-only messages.
	UserMessage *UserMessage
	// SignalMessages are the signal message units, in document order.
	SignalMessages []*SignalMessage
}

// MessageInfo is eb:MessageInfo.
type MessageInfo struct {
	Timestamp      time.Time
	MessageID      string
	RefToMessageID string
}

// PartyID is one eb:PartyId with its optional type attribute.
type PartyID struct {
	Value string
	Type  string
}

// Party is eb:From or eb:To.
type Party struct {
	PartyIDs []PartyID
	Role     string
}

// AgreementRef is eb:AgreementRef; Value is "" when the element is absent.
type AgreementRef struct {
	Value string
	Type  string
	PMode string
}

// Service is eb:Service with its optional type attribute.
type Service struct {
	Value string
	Type  string
}

// CollaborationInfo is eb:CollaborationInfo.
type CollaborationInfo struct {
	AgreementRef   AgreementRef
	Service        Service
	Action         string
	ConversationID string
}

// Property is an eb:Property of MessageProperties or PartProperties.
type Property struct {
	Name  string
	Type  string
	Value string
}

// PartInfo is one eb:PayloadInfo/eb:PartInfo.
type PartInfo struct {
	// Href is the href attribute as sent: "cid:..." for an attachment,
	// "#id" for an element of the SOAP body, "" for the SOAP body.
	Href string
	// Properties are all part properties, in order.
	Properties []Property
	// MimeType, CharacterSet and CompressionType repeat the properties of
	// those names (the first occurrence).
	MimeType        string
	CharacterSet    string
	CompressionType string
}

// PropertyMap returns the part properties as a map (first occurrence wins).
func (p *PartInfo) PropertyMap() map[string]string {
	m := make(map[string]string, len(p.Properties))
	for _, pr := range p.Properties {
		if _, ok := m[pr.Name]; !ok {
			m[pr.Name] = pr.Value
		}
	}
	return m
}

// UserMessage is eb:UserMessage.
type UserMessage struct {
	// Element is the eb:UserMessage element.
	Element *etree.Element
	// MPC is the mpc attribute, "" for the default MPC.
	MPC               string
	MessageInfo       MessageInfo
	From              Party
	To                Party
	CollaborationInfo CollaborationInfo
	MessageProperties []Property
	PayloadInfo       []PartInfo
}

// IsTest reports whether um is an ebMS test message (§5.2.2.9).
func (um *UserMessage) IsTest() bool {
	return um.CollaborationInfo.Service.Value == TestService && um.CollaborationInfo.Action == TestAction
}

// SignalMessage is eb:SignalMessage.
type SignalMessage struct {
	// Element is the eb:SignalMessage element.
	Element     *etree.Element
	MessageInfo MessageInfo
	// Receipt is the eb:Receipt element, nil when the signal has none.
	Receipt *etree.Element
	// Errors are the eb:Error elements.
	Errors []*Error
	// PullRequest is set when the signal carries an eb:PullRequest.
	PullRequest *PullRequest
}

// PullRequest is eb:PullRequest.
type PullRequest struct {
	MPC string
}

// maxUnits bounds the repeated elements of one header (party ids,
// properties, part infos, errors, signals), so that a hostile header cannot
// grow the model without limit.
const maxUnits = 1000

// ParseMessaging reads the eb:Messaging element el (the caller passes the
// element the signature verified) and validates it against ebMS 3.0 Core:
// missing or repeated required elements and malformed values give
// EBMS:0009 InvalidHeader, values that break a rule of the specification
// EBMS:0003 ValueInconsistent. Only one eb:UserMessage is allowed.
func ParseMessaging(el *etree.Element) (*Messaging, error) {
	if !Is(el, NSEbMS, "Messaging") {
		return nil, invalidHeaderf("not an eb:Messaging element")
	}
	m := &Messaging{Element: el}
	kids, err := boundedChildren(el)
	if err != nil {
		return nil, err
	}
	for _, c := range kids {
		if c.NamespaceURI() != NSEbMS {
			continue // extension elements
		}
		switch c.Tag {
		case "UserMessage":
			if m.UserMessage != nil {
				return nil, invalidHeaderf("more than one eb:UserMessage (bundling is not supported)")
			}
			um, err := parseUserMessage(c)
			if err != nil {
				return nil, err
			}
			m.UserMessage = um
		case "SignalMessage":
			if len(m.SignalMessages) >= maxUnits {
				return nil, invalidHeaderf("too many eb:SignalMessage elements")
			}
			sm, err := parseSignalMessage(c)
			if err != nil {
				return nil, err
			}
			m.SignalMessages = append(m.SignalMessages, sm)
		default:
			return nil, invalidHeaderf("unexpected element eb:%s in eb:Messaging", c.Tag)
		}
	}
	if m.UserMessage == nil && len(m.SignalMessages) == 0 {
		return nil, invalidHeaderf("eb:Messaging holds neither eb:UserMessage nor eb:SignalMessage")
	}
	return m, nil
}

// boundedChildren returns the child elements of el, failing with EBMS:0009
// beyond maxUnits of them.
func boundedChildren(el *etree.Element) ([]*etree.Element, error) {
	kids := el.ChildElements()
	if len(kids) > maxUnits {
		return nil, invalidHeaderf("more than %d elements in <%s>", maxUnits, el.Tag)
	}
	return kids, nil
}

// ebChildren groups the ebMS-namespace children of el by local name and
// rejects names outside allowed and repetitions beyond one for names in
// single.
func ebChildren(el *etree.Element, allowed ...string) (map[string][]*etree.Element, error) {
	out := map[string][]*etree.Element{}
	all, err := boundedChildren(el)
	if err != nil {
		return nil, err
	}
	for _, c := range all {
		if c.NamespaceURI() != NSEbMS {
			return nil, invalidHeaderf("unexpected element {%s}%s in eb:%s", c.NamespaceURI(), c.Tag, el.Tag)
		}
		ok := false
		for _, a := range allowed {
			if c.Tag == a {
				ok = true
				break
			}
		}
		if !ok {
			return nil, invalidHeaderf("unexpected element eb:%s in eb:%s", c.Tag, el.Tag)
		}
		if len(out[c.Tag]) >= maxUnits {
			return nil, invalidHeaderf("too many eb:%s elements in eb:%s", c.Tag, el.Tag)
		}
		out[c.Tag] = append(out[c.Tag], c)
	}
	return out, nil
}

// one returns the single child named local; required reports an absent one.
func one(kids map[string][]*etree.Element, parent, local string, required bool) (*etree.Element, error) {
	switch n := len(kids[local]); {
	case n == 0 && required:
		return nil, invalidHeaderf("eb:%s missing in eb:%s", local, parent)
	case n == 0:
		return nil, nil
	case n > 1:
		return nil, invalidHeaderf("more than one eb:%s in eb:%s", local, parent)
	}
	return kids[local][0], nil
}

// requiredText returns the text of the single required child local.
func requiredText(kids map[string][]*etree.Element, parent, local string) (string, error) {
	c, err := one(kids, parent, local, true)
	if err != nil {
		return "", err
	}
	t := Text(c)
	if t == "" {
		return "", invalidHeaderf("eb:%s in eb:%s is empty", local, parent)
	}
	return t, nil
}

func parseUserMessage(el *etree.Element) (*UserMessage, error) {
	um := &UserMessage{Element: el}
	if err := um.parse(el); err != nil {
		return nil, withRef(err, um.MessageInfo.MessageID)
	}
	return um, nil
}

func (um *UserMessage) parse(el *etree.Element) error {
	um.MPC, _ = Attr(el, "", "mpc")
	// MessageInfo first, so that every later error can name the message.
	if mis := Children(el, NSEbMS, "MessageInfo"); len(mis) == 1 {
		var err error
		if um.MessageInfo, err = parseMessageInfo(mis[0]); err != nil {
			return err
		}
	}
	kids, err := ebChildren(el, "MessageInfo", "PartyInfo", "CollaborationInfo", "MessageProperties", "PayloadInfo")
	if err != nil {
		return err
	}
	if _, err := one(kids, "UserMessage", "MessageInfo", true); err != nil {
		return err
	}
	pi, err := one(kids, "UserMessage", "PartyInfo", true)
	if err != nil {
		return err
	}
	if err := parsePartyInfo(pi, um); err != nil {
		return err
	}
	ci, err := one(kids, "UserMessage", "CollaborationInfo", true)
	if err != nil {
		return err
	}
	if um.CollaborationInfo, err = parseCollaborationInfo(ci); err != nil {
		return err
	}
	if mp, err := one(kids, "UserMessage", "MessageProperties", false); err != nil {
		return err
	} else if mp != nil {
		if um.MessageProperties, err = parseProperties(mp); err != nil {
			return err
		}
	}
	if pl, err := one(kids, "UserMessage", "PayloadInfo", false); err != nil {
		return err
	} else if pl != nil {
		if um.PayloadInfo, err = parsePayloadInfo(pl); err != nil {
			return err
		}
	}
	return nil
}

// withRef sets RefToMessageID on the *Error inside err when it has none.
func withRef(err error, messageID string) error {
	var e *Error
	if messageID != "" && errors.As(err, &e) && e.RefToMessageID == "" {
		e.RefToMessageID = messageID
	}
	return err
}

func parseMessageInfo(el *etree.Element) (MessageInfo, error) {
	var mi MessageInfo
	kids, err := ebChildren(el, "Timestamp", "MessageId", "RefToMessageId")
	if err != nil {
		return mi, err
	}
	if mi.MessageID, err = requiredText(kids, "MessageInfo", "MessageId"); err != nil {
		return mi, err
	}
	if err := checkMessageID(mi.MessageID); err != nil {
		mi.MessageID = ""
		return mi, err
	}
	ts, err := requiredText(kids, "MessageInfo", "Timestamp")
	if err != nil {
		return mi, err
	}
	if mi.Timestamp, err = ParseDateTime(ts); err != nil {
		return mi, InvalidHeader("eb:Timestamp is not an xsd:dateTime", err)
	}
	if r, err := one(kids, "MessageInfo", "RefToMessageId", false); err != nil {
		return mi, err
	} else if r != nil {
		mi.RefToMessageID = Text(r)
		if err := checkMessageID(mi.RefToMessageID); err != nil {
			return mi, err
		}
	}
	return mi, nil
}

// checkMessageID applies §5.2.2.1: an RFC 2822 msg-id without the angle
// brackets. Only printable ASCII without white space or brackets passes.
func checkMessageID(id string) error {
	if len(id) > 1024 {
		return invalidHeaderf("message id longer than 1024 bytes")
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c <= ' ' || c >= 0x7f || c == '<' || c == '>' {
			return invalidHeaderf("message id %q holds a character outside RFC 2822 msg-id", id)
		}
	}
	return nil
}

// ParseDateTime parses an xsd:dateTime. A value without a time zone is
// taken as UTC, as ebMS 3.0 requires UTC time stamps.
func ParseDateTime(s string) (time.Time, error) {
	if t, err := time.Parse("2006-01-02T15:04:05.999999999Z07:00", s); err == nil {
		return t.UTC(), nil
	}
	t, err := time.Parse("2006-01-02T15:04:05.999999999", s)
	if err != nil {
		return time.Time{}, fmt.Errorf("as4: xsd:dateTime %q: %w", s, err)
	}
	return t, nil
}

func parsePartyInfo(el *etree.Element, um *UserMessage) error {
	kids, err := ebChildren(el, "From", "To")
	if err != nil {
		return err
	}
	from, err := one(kids, "PartyInfo", "From", true)
	if err != nil {
		return err
	}
	if um.From, err = parseParty(from); err != nil {
		return err
	}
	to, err := one(kids, "PartyInfo", "To", true)
	if err != nil {
		return err
	}
	um.To, err = parseParty(to)
	return err
}

func parseParty(el *etree.Element) (Party, error) {
	var p Party
	kids, err := ebChildren(el, "PartyId", "Role")
	if err != nil {
		return p, err
	}
	if len(kids["PartyId"]) == 0 {
		return p, invalidHeaderf("eb:PartyId missing in eb:%s", el.Tag)
	}
	for _, c := range kids["PartyId"] {
		id := PartyID{Value: Text(c)}
		id.Type, _ = Attr(c, "", "type")
		if id.Value == "" {
			return p, invalidHeaderf("empty eb:PartyId in eb:%s", el.Tag)
		}
		// §5.2.2.4: without a type, the PartyId must be a URI.
		if id.Type == "" && !isAbsoluteURI(id.Value) {
			return p, ValueInconsistent(fmt.Sprintf("eb:PartyId %q has no type and is not a URI", id.Value), nil)
		}
		p.PartyIDs = append(p.PartyIDs, id)
	}
	if p.Role, err = requiredText(kids, el.Tag, "Role"); err != nil {
		return p, err
	}
	return p, nil
}

// isAbsoluteURI reports whether s starts with an RFC 3986 scheme and has
// something after the colon.
func isAbsoluteURI(s string) bool {
	i := strings.IndexByte(s, ':')
	if i <= 0 || i == len(s)-1 {
		return false
	}
	for j := 0; j < i; j++ {
		c := s[j]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if j == 0 && !letter || !letter && !(c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.') {
			return false
		}
	}
	return !strings.ContainsAny(s, " \t\r\n")
}

func parseCollaborationInfo(el *etree.Element) (CollaborationInfo, error) {
	var ci CollaborationInfo
	kids, err := ebChildren(el, "AgreementRef", "Service", "Action", "ConversationId")
	if err != nil {
		return ci, err
	}
	if ar, err := one(kids, "CollaborationInfo", "AgreementRef", false); err != nil {
		return ci, err
	} else if ar != nil {
		ci.AgreementRef.Value = Text(ar)
		ci.AgreementRef.Type, _ = Attr(ar, "", "type")
		ci.AgreementRef.PMode, _ = Attr(ar, "", "pmode")
		if ci.AgreementRef.Value == "" {
			return ci, invalidHeaderf("empty eb:AgreementRef")
		}
		if ci.AgreementRef.Type == "" && !isAbsoluteURI(ci.AgreementRef.Value) {
			return ci, ValueInconsistent(fmt.Sprintf("eb:AgreementRef %q has no type and is not a URI", ci.AgreementRef.Value), nil)
		}
	}
	svc, err := one(kids, "CollaborationInfo", "Service", true)
	if err != nil {
		return ci, err
	}
	ci.Service.Value = Text(svc)
	ci.Service.Type, _ = Attr(svc, "", "type")
	if ci.Service.Value == "" {
		return ci, invalidHeaderf("empty eb:Service")
	}
	if ci.Service.Type == "" && !isAbsoluteURI(ci.Service.Value) {
		return ci, ValueInconsistent(fmt.Sprintf("eb:Service %q has no type and is not a URI", ci.Service.Value), nil)
	}
	if ci.Action, err = requiredText(kids, "CollaborationInfo", "Action"); err != nil {
		return ci, err
	}
	// eb:ConversationId must be there but may be empty: the schema's type
	// is a plain xsd:string, and the ENTSOG profile, with BDEW's on top
	// of it, has senders write it empty (phase4's BDEW and ENTSOG senders
	// always do).
	conv, err := one(kids, "CollaborationInfo", "ConversationId", true)
	if err != nil {
		return ci, err
	}
	ci.ConversationID = Text(conv)
	return ci, nil
}

func parseProperties(el *etree.Element) ([]Property, error) {
	kids, err := ebChildren(el, "Property")
	if err != nil {
		return nil, err
	}
	var out []Property
	for _, c := range kids["Property"] {
		p := Property{Value: Text(c)}
		var ok bool
		if p.Name, ok = Attr(c, "", "name"); !ok || strings.TrimSpace(p.Name) == "" {
			return nil, invalidHeaderf("eb:Property without name in eb:%s", el.Tag)
		}
		p.Type, _ = Attr(c, "", "type")
		out = append(out, p)
	}
	return out, nil
}

func parsePayloadInfo(el *etree.Element) ([]PartInfo, error) {
	kids, err := ebChildren(el, "PartInfo")
	if err != nil {
		return nil, err
	}
	if len(kids["PartInfo"]) == 0 {
		return nil, invalidHeaderf("eb:PayloadInfo without eb:PartInfo")
	}
	var out []PartInfo
	hrefs := map[string]bool{}
	for _, c := range kids["PartInfo"] {
		pi := PartInfo{}
		pi.Href, _ = Attr(c, "", "href")
		pi.Href = strings.TrimSpace(pi.Href)
		if hrefs[pi.Href] {
			return nil, ValueInconsistent(fmt.Sprintf("two eb:PartInfo refer to %q", pi.Href), nil)
		}
		hrefs[pi.Href] = true
		pk, err := ebChildren(c, "Schema", "Description", "PartProperties")
		if err != nil {
			return nil, err
		}
		if pp, err := one(pk, "PartInfo", "PartProperties", false); err != nil {
			return nil, err
		} else if pp != nil {
			if pi.Properties, err = parseProperties(pp); err != nil {
				return nil, err
			}
		}
		m := pi.PropertyMap()
		pi.MimeType, pi.CharacterSet, pi.CompressionType = m[PropMimeType], m[PropCharacterSet], m[PropCompressionType]
		out = append(out, pi)
	}
	return out, nil
}

func parseSignalMessage(el *etree.Element) (*SignalMessage, error) {
	sm := &SignalMessage{Element: el}
	var mi *etree.Element
	kids, err := boundedChildren(el)
	if err != nil {
		return nil, err
	}
	for _, c := range kids {
		if c.NamespaceURI() != NSEbMS {
			continue // extension signals (ebMS 3.0 Part 2)
		}
		switch c.Tag {
		case "MessageInfo":
			if mi != nil {
				return nil, invalidHeaderf("more than one eb:MessageInfo in eb:SignalMessage")
			}
			mi = c
		case "Receipt":
			if sm.Receipt != nil {
				return nil, invalidHeaderf("more than one eb:Receipt in eb:SignalMessage")
			}
			sm.Receipt = c
		case "PullRequest":
			if sm.PullRequest != nil {
				return nil, invalidHeaderf("more than one eb:PullRequest in eb:SignalMessage")
			}
			sm.PullRequest = &PullRequest{}
			sm.PullRequest.MPC, _ = Attr(c, "", "mpc")
		case "Error":
			if len(sm.Errors) >= maxUnits {
				return nil, invalidHeaderf("too many eb:Error elements")
			}
			e, err := parseErrorSignal(c)
			if err != nil {
				return nil, err
			}
			sm.Errors = append(sm.Errors, e)
		default:
			return nil, invalidHeaderf("unexpected element eb:%s in eb:SignalMessage", c.Tag)
		}
	}
	if mi == nil {
		return nil, invalidHeaderf("eb:MessageInfo missing in eb:SignalMessage")
	}
	if sm.MessageInfo, err = parseMessageInfo(mi); err != nil {
		return nil, withRef(err, sm.MessageInfo.MessageID)
	}
	if sm.Receipt != nil && sm.MessageInfo.RefToMessageID == "" {
		return nil, invalidHeaderf("receipt without eb:RefToMessageId").WithRef(sm.MessageInfo.MessageID)
	}
	return sm, nil
}

func parseErrorSignal(el *etree.Element) (*Error, error) {
	e := &Error{}
	var ok bool
	if e.Code, ok = Attr(el, "", "errorCode"); !ok || e.Code == "" {
		return nil, invalidHeaderf("eb:Error without errorCode")
	}
	if e.Severity, ok = Attr(el, "", "severity"); !ok || (e.Severity != SeverityFailure && e.Severity != SeverityWarning) {
		return nil, invalidHeaderf("eb:Error %s with severity %q", e.Code, e.Severity)
	}
	e.Category, _ = Attr(el, "", "category")
	e.ShortDescription, _ = Attr(el, "", "shortDescription")
	e.RefToMessageID, _ = Attr(el, "", "refToMessageInError")
	e.Origin, _ = Attr(el, "", "origin")
	kids, err := boundedChildren(el)
	if err != nil {
		return nil, err
	}
	for _, c := range kids {
		switch {
		case Is(c, NSEbMS, "Description"):
			e.Description = Text(c)
		case Is(c, NSEbMS, "ErrorDetail"):
			e.Detail = Text(c)
		}
	}
	return e, nil
}

// Package peppol is the receiving Peppol access point (corner 3): the
// checks the Peppol AS4 profile and the Peppol Business Message Envelope
// (SBDH) require of a message from any access point whose certificate
// chains to the OpenPeppol AP CA, and the records and monthly reports
// (Transaction Statistics Report, End User Statistics Report) OpenPeppol
// reporting asks for. The AS4 endpoint calls it; it knows nothing of AS4
// parsing itself.
package peppol

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Identifier schemes and values of the Peppol network.
const (
	// PartyTypeAP is the eb:PartyId type of access points; the value is the
	// AP certificate's CN (the seat ID, e.g. POP000001).
	PartyTypeAP = "urn:fdc:peppol.eu:2017:identifiers:ap"
	// ParticipantScheme is the participant identifier scheme (SBDH
	// Authority, eb:Property type of originalSender/finalRecipient).
	ParticipantScheme = "iso6523-actorid-upis"
	// DocTypeScheme and ProcessScheme are the default schemes of document
	// type and process identifiers.
	DocTypeScheme = "busdox-docid-qns"
	ProcessScheme = "cenbii-procid-ubl"
	// TransportProfile is the SMP transport profile of Peppol AS4.
	TransportProfile = "peppol-transport-as4-v2_0"
	// CodeNotServiced is the error code of a message for a participant this
	// access point does not serve.
	CodeNotServiced = "PEPPOL:NOT_SERVICED"
)

const nsSBDH = "http://www.unece.org/cefact/namespaces/StandardBusinessDocumentHeader"

// maxHeaderBytes bounds the bytes read to find the end of the SBDH header.
const maxHeaderBytes = 1 << 20

// ErrSBDH is wrapped by every SBDH parsing error.
var ErrSBDH = errors.New("peppol: SBDH")

// Identifier is a scheme and value ("iso6523-actorid-upis", "0088:123").
type Identifier struct {
	Scheme, Value string
}

func (i Identifier) String() string { return i.Scheme + "::" + i.Value }

// SBDH is what the checks and reports need of a Peppol Business Message
// Envelope header.
type SBDH struct {
	Sender, Receiver  Identifier
	DocumentType      Identifier // BusinessScope Scope DOCUMENTID
	Process           Identifier // BusinessScope Scope PROCESSID
	CountryC1         string     // BusinessScope Scope COUNTRY_C1 (empty if absent)
	InstanceID        string     // DocumentIdentification/InstanceIdentifier
	DocumentStandard  string     // DocumentIdentification/Standard
	DocumentTypeLocal string     // DocumentIdentification/Type
}

type xmlHeader struct {
	Sender struct {
		Identifier xmlIdentifier `xml:"Identifier"`
	} `xml:"Sender"`
	Receiver struct {
		Identifier xmlIdentifier `xml:"Identifier"`
	} `xml:"Receiver"`
	DocumentIdentification struct {
		Standard           string `xml:"Standard"`
		Type               string `xml:"Type"`
		InstanceIdentifier string `xml:"InstanceIdentifier"`
	} `xml:"DocumentIdentification"`
	Scopes []struct {
		Type               string `xml:"Type"`
		InstanceIdentifier string `xml:"InstanceIdentifier"`
		Identifier         string `xml:"Identifier"`
	} `xml:"BusinessScope>Scope"`
}

type xmlIdentifier struct {
	Authority string `xml:"Authority,attr"`
	Value     string `xml:",chardata"`
}

func sbdhErr(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrSBDH}, a...)...)
}

// ParseSBDH reads the StandardBusinessDocumentHeader at the start of a
// Peppol payload. DTDs are refused; only the header (at most 1 MiB) is read.
func ParseSBDH(payload []byte) (*SBDH, error) {
	d := xml.NewDecoder(io.LimitReader(bytes.NewReader(payload), maxHeaderBytes))
	d.Strict = true
	var root xml.StartElement
	for {
		tok, err := d.Token()
		if err != nil {
			return nil, sbdhErr("the payload is not an XML document with a StandardBusinessDocument: %v", err)
		}
		switch t := tok.(type) {
		case xml.Directive:
			return nil, sbdhErr("DTDs are not accepted")
		case xml.CharData:
			if len(bytes.TrimSpace(t)) > 0 {
				return nil, sbdhErr("text before the root element")
			}
			continue
		case xml.StartElement:
			root = t
		default:
			continue
		}
		break
	}
	if root.Name.Space != nsSBDH || root.Name.Local != "StandardBusinessDocument" {
		return nil, sbdhErr("the payload's root element is {%s}%s, not a StandardBusinessDocument", root.Name.Space, root.Name.Local)
	}
	for {
		tok, err := d.Token()
		if err != nil {
			return nil, sbdhErr("no StandardBusinessDocumentHeader: %v", err)
		}
		if _, ok := tok.(xml.Directive); ok {
			return nil, sbdhErr("DTDs are not accepted")
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if se.Name.Space != nsSBDH || se.Name.Local != "StandardBusinessDocumentHeader" {
			return nil, sbdhErr("the first element of the StandardBusinessDocument is %s, not the StandardBusinessDocumentHeader", se.Name.Local)
		}
		var h xmlHeader
		if err := d.DecodeElement(&h, &se); err != nil {
			return nil, sbdhErr("StandardBusinessDocumentHeader: %v", err)
		}
		return h.sbdh()
	}
}

func (h *xmlHeader) sbdh() (*SBDH, error) {
	s := &SBDH{
		Sender:            Identifier{strings.TrimSpace(h.Sender.Identifier.Authority), strings.TrimSpace(h.Sender.Identifier.Value)},
		Receiver:          Identifier{strings.TrimSpace(h.Receiver.Identifier.Authority), strings.TrimSpace(h.Receiver.Identifier.Value)},
		InstanceID:        strings.TrimSpace(h.DocumentIdentification.InstanceIdentifier),
		DocumentStandard:  strings.TrimSpace(h.DocumentIdentification.Standard),
		DocumentTypeLocal: strings.TrimSpace(h.DocumentIdentification.Type),
	}
	seen := map[string]bool{}
	for _, sc := range h.Scopes {
		typ := strings.TrimSpace(sc.Type)
		id := Identifier{strings.TrimSpace(sc.Identifier), strings.TrimSpace(sc.InstanceIdentifier)}
		switch typ {
		case "DOCUMENTID", "PROCESSID", "COUNTRY_C1":
			if seen[typ] {
				return nil, sbdhErr("BusinessScope has two %s scopes", typ)
			}
			seen[typ] = true
		}
		switch typ {
		case "DOCUMENTID":
			if id.Scheme == "" {
				id.Scheme = DocTypeScheme
			}
			s.DocumentType = id
		case "PROCESSID":
			if id.Scheme == "" {
				id.Scheme = ProcessScheme
			}
			s.Process = id
		case "COUNTRY_C1":
			s.CountryC1 = id.Value
		}
	}
	for _, f := range []struct {
		name string
		v    string
	}{{"Sender/Identifier", s.Sender.Value}, {"Sender/Identifier/@Authority", s.Sender.Scheme},
		{"Receiver/Identifier", s.Receiver.Value}, {"Receiver/Identifier/@Authority", s.Receiver.Scheme},
		{"DocumentIdentification/InstanceIdentifier", s.InstanceID},
		{"BusinessScope/Scope[Type=DOCUMENTID]", s.DocumentType.Value}, {"BusinessScope/Scope[Type=PROCESSID]", s.Process.Value}} {
		if f.v == "" {
			return nil, sbdhErr("%s is missing", f.name)
		}
	}
	return s, nil
}

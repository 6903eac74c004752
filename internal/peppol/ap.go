package peppol

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/edigateway/gateway/internal/trust"
)

// Error codes of refusals (besides CodeNotServiced).
const (
	// CodeOther (EBMS:0004) refuses an SBDH that is missing or does not
	// agree with the ebMS header: the ebMS 3 table has no code for the
	// business envelope, and phase4, the reference sender in the Peppol
	// testbed, raises its SBDH checks as EBMS:0004.
	CodeOther = "EBMS:0004"
)

// Settings configure an AP.
type Settings struct {
	// APCA are the OpenPeppol AP CA certificates (roots and the AP
	// intermediate CA).
	APCA []*x509.Certificate
	// Participants are the participant identifiers we receive for
	// ("0088:5790000435975", or "scheme::value"; the scheme defaults to
	// iso6523-actorid-upis). Compared case-insensitively.
	Participants []string
	Revocation   trust.Revocation
	// ReporterID is our AP's seat ID (our certificate's CN) for reports.
	ReporterID string
	// Country is the ISO 3166 country of our end users (C4) for reports.
	Country string
	// Records receives one record per accepted transaction (nil: none).
	Records *Recorder
}

// AP is the receiving access point.
type AP struct {
	Policy       *trust.CAPolicy
	participants map[string]bool
	settings     Settings
}

// New checks s and returns the access point.
func New(s Settings) (*AP, error) {
	if len(s.APCA) == 0 {
		return nil, errors.New("peppol: no AP CA certificate")
	}
	if len(s.Participants) == 0 {
		return nil, errors.New("peppol: no participant")
	}
	ap := &AP{participants: map[string]bool{}, settings: s}
	for _, p := range s.Participants {
		id, err := ParseParticipant(p)
		if err != nil {
			return nil, err
		}
		ap.participants[key(id)] = true
	}
	// The AP CA is an intermediate below the OpenPeppol root: a configured
	// file may hold either; each one is a trust anchor, so that an operator
	// may configure the AP CA alone.
	ap.Policy = &trust.CAPolicy{Roots: s.APCA, Revocation: s.Revocation}
	return ap, nil
}

// ParseParticipant reads "0088:123" or "iso6523-actorid-upis::0088:123".
func ParseParticipant(s string) (Identifier, error) {
	s = strings.TrimSpace(s)
	id := Identifier{Scheme: ParticipantScheme, Value: s}
	if scheme, v, ok := strings.Cut(s, "::"); ok {
		id = Identifier{Scheme: scheme, Value: v}
	}
	icd, rest, ok := strings.Cut(id.Value, ":")
	if id.Scheme == ParticipantScheme && (!ok || len(icd) != 4 || strings.Trim(icd, "0123456789") != "" || rest == "") {
		return Identifier{}, fmt.Errorf("peppol: participant %q is not ICD:identifier (four digits, a colon, the identifier)", s)
	}
	return id, nil
}

func key(id Identifier) string { return strings.ToLower(id.Scheme + "::" + id.Value) }

func same(a, b Identifier) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Value, b.Value)
}

// Message is what the checks read of the ebMS header (the signed one).
type Message struct {
	MessageID string
	// FromAP is the eb:From PartyId of type PartyTypeAP.
	FromAP string
	// Service is eb:Service (Scheme: its type attribute), Action eb:Action.
	Service Identifier
	Action  string
	// OriginalSender and FinalRecipient are the eb:MessageProperties of
	// those names (Scheme: the property's type); Found* say whether present.
	OriginalSender, FinalRecipient           Identifier
	FoundOriginalSender, FoundFinalRecipient bool
	Received                                 time.Time
}

// Refusal is a check that failed: Code is the error code for the sender.
type Refusal struct {
	Code   string
	Reason string
}

func (r *Refusal) Error() string { return r.Code + ": " + r.Reason }

// Check applies the Peppol AS4 profile's header rules and the SBDH
// consistency rules to m and its payload's envelope h, and returns the
// transaction to record.
func (ap *AP) Check(m Message, h *SBDH) (*Transaction, *Refusal) {
	other := func(format string, a ...any) (*Transaction, *Refusal) {
		return nil, &Refusal{Code: CodeOther, Reason: fmt.Sprintf(format, a...)}
	}
	if !m.FoundOriginalSender || !m.FoundFinalRecipient {
		return other("eb:MessageProperties must carry originalSender and finalRecipient (Peppol AS4 profile)")
	}
	if !same(m.OriginalSender, h.Sender) {
		return other("eb:MessageProperties originalSender %s is not the SBDH Sender %s", m.OriginalSender, h.Sender)
	}
	if !same(m.FinalRecipient, h.Receiver) {
		return other("eb:MessageProperties finalRecipient %s is not the SBDH Receiver %s", m.FinalRecipient, h.Receiver)
	}
	if !ap.participants[key(h.Receiver)] {
		return nil, &Refusal{Code: CodeNotServiced, Reason: fmt.Sprintf("the receiver %s is not served by this access point", h.Receiver)}
	}
	if m.Service.Value != h.Process.Value || (m.Service.Scheme != "" && m.Service.Scheme != h.Process.Scheme) {
		return other("eb:Service %s is not the SBDH process %s", m.Service, h.Process)
	}
	// eb:Action is the document type identifier with its scheme
	// ("busdox-docid-qns::urn:oasis:…"); the bare value is accepted too.
	if m.Action != h.DocumentType.String() && m.Action != h.DocumentType.Value {
		return other("eb:Action %q is not the SBDH document type %s", m.Action, h.DocumentType)
	}
	return &Transaction{
		Time: m.Received.UTC(), MessageID: m.MessageID, Direction: "incoming",
		C2: m.FromAP, C3: ap.settings.ReporterID, TransportProfile: TransportProfile,
		DocTypeScheme: h.DocumentType.Scheme, DocType: h.DocumentType.Value,
		ProcessScheme: h.Process.Scheme, Process: h.Process.Value,
		C1Country: h.CountryC1, C4Country: ap.settings.Country,
		Sender: h.Sender.String(), Receiver: h.Receiver.String(), InstanceID: h.InstanceID,
	}, nil
}

// Record stores an accepted transaction (no-op without a Recorder).
func (ap *AP) Record(t *Transaction) error {
	if ap.settings.Records == nil {
		return nil
	}
	return ap.settings.Records.Add(t)
}

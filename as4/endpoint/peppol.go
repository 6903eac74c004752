package endpoint

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/peppol"
	"github.com/edigateway/gateway/partners"
)

// PeppolPartnerID is the partner id of messages received in Peppol AP mode
// (inbox directory, audit records): senders have no partner file.
const PeppolPartnerID = "peppol"

// peppolPartner is the agreement of a Peppol access point that has no
// partner file: identified by its eb:From PartyId of type
// urn:fdc:peppol.eu:2017:identifiers:ap, which must be the CN of its
// signing certificate (a BinarySecurityToken chaining to the AP CA).
func (e *Endpoint) peppolPartner(from as4.Party) (*partners.Partner, as4.PartyID, bool) {
	if e.cfg.Peppol == nil {
		return nil, as4.PartyID{}, false
	}
	for _, pid := range from.PartyIDs {
		if pid.Type != peppol.PartyTypeAP || pid.Value == "" {
			continue
		}
		return &partners.Partner{ID: PeppolPartnerID, OnDrift: "reject", AS4: &partners.AS4{
			PartyID: pid.Value, PartyType: pid.Type,
			// Peppol AS4 profile: payloads are always encrypted.
			RequireEncryption: true,
			ClockSkew:         partners.Duration(5 * time.Minute), DedupWindow: partners.Duration(partners.DefaultAS4Window),
			PModes: []partners.PMode{{ID: "peppol"}},
			Trust:  partners.Trust{Model: "ca", PartyIDIsCN: true},
		}}, pid, true
	}
	return nil, as4.PartyID{}, false
}

// peppolCheck applies the Peppol rules to a verified user message and its
// payloads; the transaction is recorded once the message is accepted.
func (e *Endpoint) peppolCheck(um *as4.UserMessage, from as4.PartyID, payloads []exchange.Payload) (*peppol.Transaction, *as4.Error) {
	if len(payloads) != 1 {
		return nil, as4.Other(fmt.Sprintf("a Peppol message carries exactly one payload, the business document in its SBDH; this one has %d", len(payloads)), nil)
	}
	rc, err := payloads[0].Open()
	if err != nil {
		return nil, as4.Other("the payload could not be read", err)
	}
	b, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	rc.Close()
	if err != nil {
		return nil, as4.Other("the payload could not be read", err)
	}
	h, err := peppol.ParseSBDH(b)
	if err != nil {
		return nil, as4.Other(strings.TrimSuffix("the payload's Peppol envelope (SBDH) could not be read: "+partnerText(err.Error()), ": "), err)
	}
	m := peppol.Message{MessageID: um.MessageInfo.MessageID, FromAP: from.Value, Action: um.CollaborationInfo.Action,
		Service:  peppol.Identifier{Scheme: um.CollaborationInfo.Service.Type, Value: um.CollaborationInfo.Service.Value},
		Received: e.cfg.Now()}
	for _, p := range um.MessageProperties {
		id := peppol.Identifier{Scheme: p.Type, Value: p.Value}
		if id.Scheme == "" {
			id.Scheme = peppol.ParticipantScheme
		}
		switch p.Name {
		case "originalSender":
			m.OriginalSender, m.FoundOriginalSender = id, true
		case "finalRecipient":
			m.FinalRecipient, m.FoundFinalRecipient = id, true
		}
	}
	tx, ref := e.cfg.Peppol.Check(m, h)
	if ref != nil {
		ae := as4.NewError(ref.Code, ref.Reason, nil)
		if ref.Code == peppol.CodeNotServiced {
			ae.ShortDescription = "NotServiced"
		}
		return nil, ae
	}
	return tx, nil
}

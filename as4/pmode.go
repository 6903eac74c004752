package as4

import "fmt"

// PMode is the part of a receiving processing mode that selects it for a
// user message. An empty field matches any value.
type PMode struct {
	ID            string
	Agreement     string
	Service       string
	ServiceType   string
	Action        string
	FromPartyID   string
	FromPartyType string
	ToPartyID     string
	ToPartyType   string
	FromRole      string
	ToRole        string
}

// Match returns the P-Mode for um: the candidate whose every non-empty field
// equals the message's value and that fixes the most fields. A PartyID
// matches when any eb:PartyId of the party has that value (and type, when
// the P-Mode sets one). For an ebMS test message (IsTest) Service,
// ServiceType and Action are not compared, so that a partner can test any
// agreement. Among equally specific candidates the one whose ID equals
// eb:AgreementRef/@pmode wins, else the first in pmodes. No candidate gives
// EBMS:0010 ProcessingModeMismatch.
func Match(pmodes []PMode, um *UserMessage) (*PMode, error) {
	if um == nil {
		return nil, ProcessingModeMismatch("no user message", nil)
	}
	best, bestScore := -1, -1
	for i := range pmodes {
		score, ok := matchScore(&pmodes[i], um)
		if !ok {
			continue
		}
		switch {
		case score > bestScore:
			best, bestScore = i, score
		case score == bestScore && um.CollaborationInfo.AgreementRef.PMode != "" &&
			pmodes[i].ID == um.CollaborationInfo.AgreementRef.PMode &&
			pmodes[best].ID != um.CollaborationInfo.AgreementRef.PMode:
			best = i
		}
	}
	if best < 0 {
		ci := um.CollaborationInfo
		return nil, ProcessingModeMismatch(fmt.Sprintf("no P-Mode for agreement %q, service %q, action %q from %s to %s",
			ci.AgreementRef.Value, ci.Service.Value, ci.Action, partyString(um.From), partyString(um.To)), nil).
			WithRef(um.MessageInfo.MessageID)
	}
	return &pmodes[best], nil
}

func partyString(p Party) string {
	if len(p.PartyIDs) == 0 {
		return "?"
	}
	s := p.PartyIDs[0].Value
	if p.PartyIDs[0].Type != "" {
		s = p.PartyIDs[0].Type + ":" + s
	}
	return fmt.Sprintf("%q", s)
}

// matchScore reports whether pm matches um and how many fields it fixes.
func matchScore(pm *PMode, um *UserMessage) (int, bool) {
	score := 0
	eq := func(want, got string) bool {
		if want == "" {
			return true
		}
		score++
		return want == got
	}
	ci := um.CollaborationInfo
	if !eq(pm.Agreement, ci.AgreementRef.Value) {
		return 0, false
	}
	if !um.IsTest() {
		if !eq(pm.Service, ci.Service.Value) || !eq(pm.ServiceType, ci.Service.Type) || !eq(pm.Action, ci.Action) {
			return 0, false
		}
	}
	if !eq(pm.FromRole, um.From.Role) || !eq(pm.ToRole, um.To.Role) {
		return 0, false
	}
	if !partyMatches(pm.FromPartyID, pm.FromPartyType, um.From, &score) ||
		!partyMatches(pm.ToPartyID, pm.ToPartyType, um.To, &score) {
		return 0, false
	}
	return score, true
}

func partyMatches(id, typ string, p Party, score *int) bool {
	if id == "" && typ == "" {
		return true
	}
	for _, pid := range p.PartyIDs {
		if (id == "" || pid.Value == id) && (typ == "" || pid.Type == typ) {
			if id != "" {
				*score++
			}
			if typ != "" {
				*score++
			}
			return true
		}
	}
	return false
}

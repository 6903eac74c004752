package endpoint

import (
	"testing"

	"github.com/edigateway/gateway/as4"
)

// identityFor matches eb:To as P-Mode matching does: an identity without
// a type matches any type, the exact type wins, and an unknown eb:To falls
// back to the first identity.
func TestIdentityForMatchesLikePModes(t *testing.T) {
	first := &ownIdentity{Identity: Identity{PartyID: "urn:gw", PartyType: "t"}}
	untyped := &ownIdentity{Identity: Identity{PartyID: "urn:gw2"}}
	typed := &ownIdentity{Identity: Identity{PartyID: "urn:gw2", PartyType: "t"}}
	e := &Endpoint{ids: []*ownIdentity{first, untyped, typed}}
	to := func(v, typ string) as4.Party { return as4.Party{PartyIDs: []as4.PartyID{{Value: v, Type: typ}}} }
	for _, tc := range []struct {
		to   as4.Party
		want *ownIdentity
	}{
		{to("urn:gw", "t"), first},
		{to("urn:gw2", "t"), typed},
		{to("urn:gw2", "other"), untyped},
		{to("urn:gw2", ""), untyped},
		{to("urn:gw", "other"), first}, // no identity matches: the first
		{to("urn:nobody", ""), first},
	} {
		if got := e.identityFor(tc.to); got != tc.want {
			t.Errorf("eb:To %+v: identity %+v, want %+v", tc.to.PartyIDs, got.Identity, tc.want.Identity)
		}
	}
}

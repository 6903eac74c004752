package partners

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/outbound"
)

// ours are two identities of ours (names only): GW / urn:gw, then GW2 /
// urn:gw2; a third with only a party id of another type.
var ours = []config.Identity{
	{AS2ID: "GW", PartyID: "urn:gw"},
	{AS2ID: "GW2", PartyID: "urn:gw2"},
	{PartyID: "urn:gw2", PartyType: "urn:other"},
}

// TestSendIdentity: as2.our_as2_id and as4.send.from_party_id pick the
// identity we send as; without them, the first identity with an as2_id
// (party_id); a name that is none of ours is -1.
func TestSendIdentity(t *testing.T) {
	for name, c := range map[string]struct {
		file     string
		as2, as4 int
	}{
		"defaults": {"id: acme\nas2:\n  as2_id: ACME\n  certificates: [acme.pem]\n  send: {url: https://a.example}\n" + as4Head +
			"  send: {url: https://a.example}\n", 0, 0},
		"second identity": {"id: acme\nas2:\n  as2_id: ACME\n  our_as2_id: GW2\n  certificates: [acme.pem]\n  send: {url: https://a.example}\n" + as4Head +
			"  send: {url: https://a.example, from_party_id: urn:gw2}\n", 1, 1},
		"none of ours": {"id: acme\nas2:\n  as2_id: ACME\n  our_as2_id: GW3\n  certificates: [acme.pem]\n" + as4Head +
			"  send: {url: https://a.example, from_party_id: urn:gw3}\n", -1, -1},
	} {
		d, _, err := loadOne(t, c.file)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p := d.Partners[0]
		if got2, got4 := p.SendIdentity(outbound.AS2, ours), p.SendIdentity(outbound.AS4, ours); got2 != c.as2 || got4 != c.as4 {
			t.Errorf("%s: SendIdentity %d, %d; want %d, %d", name, got2, got4, c.as2, c.as4)
		}
	}
	// Without an identity with an as2_id first: the first one that has it.
	d, _, err := loadOne(t, "id: acme\nas2:\n  as2_id: ACME\n  certificates: [acme.pem]\n  send: {url: https://a.example}\n")
	if err != nil {
		t.Fatal(err)
	}
	if j := d.Partners[0].SendIdentity(outbound.AS2, []config.Identity{{PartyID: "urn:x"}, {AS2ID: "X"}}); j != 1 {
		t.Errorf("SendIdentity %d, want the first identity with an as2_id (1)", j)
	}
}

// TestCheckIdentities: an as2.our_as2_id or as4.send.from_party_id that
// names none of our identities is an error naming the file and the key,
// one per problem; our identities' names pass.
func TestCheckIdentities(t *testing.T) {
	d, _, err := loadOne(t, "id: acme\nas2:\n  as2_id: ACME\n  our_as2_id: GW2\n  certificates: [acme.pem]\n  send: {url: https://a.example}\n"+as4Head+
		"  send: {url: https://a.example, from_party_id: urn:gw2}\n")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CheckIdentities(ours); err != nil {
		t.Errorf("our identities refused: %v", err)
	}
	// A receive-only partner's unknown our_as2_id is accepted as before.
	d, _, err = loadOne(t, "id: acme\nas2:\n  as2_id: ACME\n  our_as2_id: GW3\n  certificates: [acme.pem]\n")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CheckIdentities(ours); err != nil {
		t.Errorf("a receive-only partner's our_as2_id refused: %v", err)
	}
	if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], `as2.our_as2_id: "GW3" is the as2_id of none of our identities`) {
		t.Errorf("warnings for a receive-only partner's unknown our_as2_id: %q", d.Warnings)
	}
	d, file, err := loadOne(t, "id: acme\nas2:\n  as2_id: ACME\n  our_as2_id: GW3\n  certificates: [acme.pem]\n  send: {url: https://a.example}\n"+as4Head+
		"  send: {url: https://a.example, from_party_id: urn:gw3}\n")
	if err != nil {
		t.Fatal(err)
	}
	err = d.CheckIdentities(ours)
	for _, want := range []string{
		file + `: as2.our_as2_id: "GW3" is the as2_id of none of our identities (identity, identities[]: "GW", "GW2")`,
		file + `: as4.send.from_party_id: "urn:gw3" is the party_id of none of our identities (identity, identities[]: "urn:gw", "urn:gw2")`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v\nwant %q", err, want)
		}
	}
	if err := d.CheckIdentities(nil); err == nil || !strings.Contains(err.Error(), "(identity, identities[]: none)") {
		t.Errorf("without identities: %v", err)
	}
	// A from_party_id with spaces is refused when the file loads.
	if _, f, err := loadOne(t, "id: acme\n"+as4Head+"  send: {url: https://a.example, from_party_id: \" urn:gw\"}\n"); err == nil ||
		!strings.Contains(err.Error(), filepath.Base(f)+`: as4.send.from_party_id: " urn:gw" has leading or trailing spaces`) {
		t.Errorf("from_party_id with spaces: %v", err)
	}
}

// TestFilenameProperty: as4.send.filename_property takes a part property
// name; a name with spaces or a reserved one is refused naming the key.
func TestFilenameProperty(t *testing.T) {
	d, _, err := loadOne(t, "id: acme\n"+as4Head+"  send: {url: https://a.example, filename_property: FileName}\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Partners[0].AS4.Send.FilenameProperty; got != "FileName" {
		t.Fatalf("filename_property %q", got)
	}
	for _, bad := range []string{"File Name", "MimeType"} {
		_, f, err := loadOne(t, "id: acme\n"+as4Head+"  send: {url: https://a.example, filename_property: \""+bad+"\"}\n")
		if err == nil || !strings.Contains(err.Error(), filepath.Base(f)+": as4.send.filename_property:") {
			t.Errorf("filename_property %q: %v", bad, err)
		}
	}
}

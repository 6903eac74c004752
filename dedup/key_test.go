package dedup

import "testing"

// These vectors pin the transport key encoding. If one changes, keys stored
// by earlier gateways no longer match retransmissions: bump the tag instead.
func TestTransportKeyVectors(t *testing.T) {
	for _, tc := range []struct {
		protocol, senderType, sender, id string
		want                             Key
	}{
		{"as2", "as2", "mecas2", "<mendelson_opensource_AS2-1641304626700-55@mecas2_pyas2lib>", "da66f8cc2c063f9f50a78b79ebe3e4a144e73aeb6e563a37d3eb4145ef68c506"},
		{"as4", "urn:oasis:names:tc:ebcore:partyid-type:unregistered", "org:holodeckb2b:example:company:A", "b545c3a0-e57f-46aa-862f-381eb4b70097@CLT-SMOREELS.mshome.net", "1470ec35da25f7fa5ca3cf83d4d3bc6fc97d470e2540ac3238941452e8ae8618"},
		{"as2", "as2", "", "", "7060768c44e23da2593f504f33da9e8d9fd1eead8ad7eb9eab396c47a14d4ad2"},
	} {
		got := TransportKey(tc.protocol, tc.senderType, tc.sender, tc.id)
		if got != tc.want {
			t.Errorf("TransportKey(%q, %q, %q, %q) = %s, want %s", tc.protocol, tc.senderType, tc.sender, tc.id, got, tc.want)
		}
		if !got.Valid() {
			t.Errorf("%s is not a valid key", got)
		}
	}
}

func TestMessageIDNormalisation(t *testing.T) {
	base := TransportKey("as2", "as2", "ACME", "abc@host")
	for _, id := range []string{"<abc@host>", " <abc@host> ", "abc@host", "\tabc@host\r\n", "< abc@host >"} {
		if got := TransportKey("as2", "as2", "ACME", id); got != base {
			t.Errorf("%q gives %s, want %s", id, got, base)
		}
	}
	if TransportKey("as2", "as2", "ACME", "<<abc@host>>") == base {
		t.Error("only one pair of brackets is removed")
	}
}

func TestKeysDoNotCollide(t *testing.T) {
	keys := map[Key]string{}
	add := func(name string, k Key) {
		if prev, ok := keys[k]; ok {
			t.Errorf("%s collides with %s", name, prev)
		}
		keys[k] = name
	}
	add("acme/m1", TransportKey("as2", "as2", "ACME", "m1"))
	add("beta/m1", TransportKey("as2", "as2", "BETA", "m1"))
	add("as4 acme/m1", TransportKey("as4", "as2", "ACME", "m1"))
	// Field boundaries must not shift: ("AC","ME1") vs ("ACM","E1").
	add("AC|ME1", TransportKey("as2", "as2", "AC", "ME1"))
	add("ACM|E1", TransportKey("as2", "as2", "ACM", "E1"))
	add("type shift", TransportKey("as2", "as2A", "CM", "E1"))
	if TransportKey("as2", "as2", "ACME", "m1") == TransportKey("as2", "as2", "acme", "m1") {
		t.Error("sender ids are case sensitive")
	}
}

func TestKeyValid(t *testing.T) {
	for k, want := range map[Key]bool{
		TransportKey("a", "b", "c", "d"): true,
		"":                               false,
		"ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789": false,
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde":  false,
	} {
		if k.Valid() != want {
			t.Errorf("%q.Valid() = %v", k, !want)
		}
	}
}

package wssec

import (
	"crypto/x509"
	"net/textproto"
	"strings"
	"testing"
)

func cidAttachment(id, body string) Attachment {
	h := textproto.MIMEHeader{}
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-ID", "<"+id+">")
	return Attachment{ContentID: "<" + id + ">", Header: h, Body: []byte(body)}
}

// TestCIDReferencesArePercentDecodedOnce: RFC 2392 cid: URLs carry the
// Content-ID %-encoded. The reference is decoded exactly once, and the
// attachment whose digest was checked is the one that counts as signed. A
// sibling whose Content-ID equals a different decoding of the same URL
// (cid:x%41 → "xA") is neither digested nor covered.
func TestCIDReferencesArePercentDecodedOnce(t *testing.T) {
	k := key(t, "rsa")
	opts := VerifyOptions{Trusted: []*x509.Certificate{k.cert}}
	signedAtt := cidAttachment("x%41@gw.test", "signed content")
	twin := cidAttachment("xA@gw.test", "unsigned content")

	raw := signedMessage(t, k, []Attachment{signedAtt}, nil)
	doc := mustParse(t, raw)
	var uris []string
	for _, r := range find(doc, NamespaceDSig, "SignedInfo").ChildElements() {
		if u := r.SelectAttrValue("URI", ""); strings.HasPrefix(u, "cid:") {
			uris = append(uris, u)
		}
	}
	if len(uris) != 1 || uris[0] != "cid:x%2541@gw.test" {
		t.Errorf("attachment reference URIs = %q, want [cid:x%%2541@gw.test]", uris)
	}
	if _, err := Verify(doc, []Attachment{signedAtt}, opts); err != nil {
		t.Fatalf("round trip: %v", err)
	}
	_, err := Verify(mustParse(t, raw), []Attachment{signedAtt, twin}, opts)
	if Code(err) != CodePolicyNoncompliance || !strings.Contains(err.Error(), `attachment "<xA@gw.test>" is not covered`) {
		t.Fatalf("unsigned twin: Verify = %v, want EBMS:0103 not covered", err)
	}

	// A sender that writes the Content-ID unencoded: cid:x%41 names "xA",
	// so the digest is checked against the twin and fails, rather
	// than being checked against "x%41 1" while the twin counts as covered.
	doc = mustParse(t, raw)
	for _, r := range find(doc, NamespaceDSig, "SignedInfo").ChildElements() {
		if strings.HasPrefix(r.SelectAttrValue("URI", ""), "cid:") {
			r.CreateAttr("URI", "cid:x%41@gw.test")
		}
	}
	resign(t, doc, k)
	_, err = Verify(doc, []Attachment{signedAtt, twin}, opts)
	if Code(err) != CodeFailedAuthentication || !strings.Contains(err.Error(), "digest mismatch") {
		t.Fatalf("raw reference: Verify = %v, want EBMS:0101 digest mismatch", err)
	}

	// Invalid %-encoding names no attachment.
	doc = mustParse(t, raw)
	for _, r := range find(doc, NamespaceDSig, "SignedInfo").ChildElements() {
		if strings.HasPrefix(r.SelectAttrValue("URI", ""), "cid:") {
			r.CreateAttr("URI", "cid:x%4")
		}
	}
	resign(t, doc, k)
	if _, err = Verify(doc, []Attachment{signedAtt}, opts); Code(err) != CodeFailedAuthentication || !strings.Contains(err.Error(), "invalid %-encoding") {
		t.Fatalf("bad escape: Verify = %v, want EBMS:0101 invalid %%-encoding", err)
	}
}

func TestCIDURLRoundTrip(t *testing.T) {
	for _, id := range []string{"payload-1@gateway.test", "a b%c<d>\"é/?:=", ""} {
		got, err := cidContentID(cidURL(id))
		if err != nil || got != id {
			t.Errorf("cidContentID(cidURL(%q)) = %q, %v", id, got, err)
		}
	}
	if got := cidURL("a b%c<d>é"); got != "cid:a%20b%25c%3Cd%3E%C3%A9" {
		t.Errorf("cidURL = %q", got)
	}
	if got := cidURL("payload-1@gateway.test"); got != "cid:payload-1@gateway.test" {
		t.Errorf("cidURL = %q", got)
	}
}

package mdn

import (
	"bytes"
	"crypto"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// fixedBoundaries makes newBoundary return B1, B2, ... for the test.
func fixedBoundaries(t *testing.T) {
	t.Helper()
	old := newBoundary
	n := 0
	newBoundary = func() string { n++; return fmt.Sprintf("B%d", n) }
	t.Cleanup(func() { newBoundary = old })
}

func sampleReport() Report {
	return Report{
		ReportingUA:       "gateway",
		OriginalRecipient: "OURID",
		FinalRecipient:    "OURID",
		OriginalMessageID: "<msg-1@partner.example>",
		MIC:               "G6PhshLOERWJEIfypIh6Q3sno6cBUWJBDky1igJvDMo=",
		MICAlg:            "sha-256",
		Disposition:       DispProcessed,
		HumanText:         "Received.\nThank you.\n",
		AS2From:           "OURID",
		AS2To:             "Partner Co",
		MessageID:         "<mdn-1@gateway>",
	}
}

func TestBuildExactBytes(t *testing.T) {
	fixedBoundaries(t)
	ct, body := Build(sampleReport())
	if want := `multipart/report; report-type=disposition-notification; boundary="B1"`; ct != want {
		t.Fatalf("content type %q, want %q", ct, want)
	}
	want := "--B1\r\n" +
		"Content-Type: text/plain; charset=us-ascii\r\n" +
		"Content-Transfer-Encoding: 7bit\r\n" +
		"\r\n" +
		"Received.\r\nThank you.\r\n" +
		"--B1\r\n" +
		"Content-Type: message/disposition-notification\r\n" +
		"Content-Transfer-Encoding: 7bit\r\n" +
		"\r\n" +
		"Reporting-UA: gateway\r\n" +
		"Original-Recipient: rfc822; OURID\r\n" +
		"Final-Recipient: rfc822; OURID\r\n" +
		"Original-Message-ID: <msg-1@partner.example>\r\n" +
		"Received-Content-MIC: G6PhshLOERWJEIfypIh6Q3sno6cBUWJBDky1igJvDMo=, sha-256\r\n" +
		"Disposition: automatic-action/MDN-sent-automatically; processed\r\n" +
		"\r\n" +
		"--B1--\r\n"
	if string(body) != want {
		t.Fatalf("body:\n%q\nwant:\n%q", body, want)
	}
}

func TestBuildEntity(t *testing.T) {
	fixedBoundaries(t)
	e := BuildEntity(sampleReport())
	prefix := "Content-Type: multipart/report; report-type=disposition-notification; boundary=\"B1\"\r\n\r\n--B1\r\n"
	if !bytes.HasPrefix(e, []byte(prefix)) {
		t.Fatalf("entity starts %q", e[:min(len(e), len(prefix))])
	}
	if bytes.Contains(bytes.ReplaceAll(e, []byte("\r\n"), nil), []byte("\n")) {
		t.Fatal("entity has a bare LF")
	}
}

func TestBuildDefaultsAndSanitising(t *testing.T) {
	fixedBoundaries(t)
	r := Report{
		OriginalMessageID: "<evil@x>\r\nDisposition: automatic-action/MDN-sent-automatically; processed",
		Disposition:       DispDecryptionFailed,
		AS2From:           "OURID",
	}
	_, body := Build(r)
	s := string(body)
	for _, want := range []string{
		"\r\nFinal-Recipient: rfc822; OURID\r\n",
		"\r\nOriginal-Message-ID: <evil@x>  Disposition: automatic-action/MDN-sent-automatically; processed\r\n",
		"\r\nDisposition: automatic-action/MDN-sent-automatically; processed/error: decryption-failed\r\n",
		"could not be processed: decryption-failed.",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("body lacks %q:\n%s", want, s)
		}
	}
	for _, absent := range []string{"Original-Recipient", "Received-Content-MIC", "Reporting-UA"} {
		if strings.Contains(s, absent) {
			t.Errorf("body has %s although it was empty", absent)
		}
	}
	p, err := Parse(`multipart/report; report-type=disposition-notification; boundary="B1"`, body)
	if err != nil {
		t.Fatal(err)
	}
	if p.Report.Disposition != DispDecryptionFailed {
		t.Fatalf("injected disposition won: %v", p.Report.Disposition)
	}
}

func TestBuildUTF8Text(t *testing.T) {
	fixedBoundaries(t)
	r := sampleReport()
	r.HumanText = "Empfangen – danke"
	_, body := Build(r)
	if !bytes.Contains(body, []byte("Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\nEmpfangen – danke\r\n--B1")) {
		t.Fatalf("utf-8 text part wrong:\n%s", body)
	}
	p, err := Parse(`multipart/report; report-type=disposition-notification; boundary="B1"`, body)
	if err != nil {
		t.Fatal(err)
	}
	if p.Report.HumanText != r.HumanText {
		t.Fatalf("human text %q", p.Report.HumanText)
	}
}

func TestBoundaryAvoidsContent(t *testing.T) {
	old := newBoundary
	t.Cleanup(func() { newBoundary = old })
	seq := []string{"Thank", "B2"}
	newBoundary = func() string { b := seq[0]; seq = seq[1:]; return b }
	r := sampleReport()
	ct, _ := Build(r)
	if !strings.HasSuffix(ct, `boundary="B2"`) {
		t.Fatalf("boundary that occurs in the text was used: %s", ct)
	}
}

func TestSignExactBytes(t *testing.T) {
	fixedBoundaries(t)
	entity := []byte("Content-Type: text/plain\r\n\r\nhello\r\n")
	sig := bytes.Repeat([]byte{0x30, 0x82, 0x01}, 40) // 120 bytes -> 160 base64 chars
	var got []byte
	ct, body, err := Sign(entity, "sha-256", func(content []byte) ([]byte, error) {
		got = append([]byte(nil), content...)
		return sig, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, entity) {
		t.Fatalf("signer got %q", got)
	}
	if want := `multipart/signed; protocol="application/pkcs7-signature"; micalg=sha-256; boundary="B1"`; ct != want {
		t.Fatalf("content type %q", ct)
	}
	b64 := strings.Repeat("MIIB", 19) + "\r\n" + strings.Repeat("MIIB", 19) + "\r\n" + "MIIBMIIB\r\n"
	want := "--B1\r\n" + string(entity) + "\r\n--B1\r\n" +
		"Content-Type: application/pkcs7-signature; name=smime.p7s\r\n" +
		"Content-Transfer-Encoding: base64\r\n" +
		"Content-Disposition: attachment; filename=\"smime.p7s\"\r\n\r\n" +
		b64 + "--B1--\r\n"
	if string(body) != want {
		t.Fatalf("body:\n%q\nwant:\n%q", body, want)
	}
	p, err := splitMultipart(body, "B1")
	if err != nil || len(p) != 2 || !bytes.Equal(p[0], entity) {
		t.Fatalf("first part not the exact entity: %q %v", p, err)
	}
}

func TestSignErrors(t *testing.T) {
	ok := func([]byte) ([]byte, error) { return []byte{0x30}, nil }
	if _, _, err := Sign([]byte("x"), "sha 256", ok); err == nil {
		t.Error("micalg with space accepted")
	}
	if _, _, err := Sign(nil, "sha-256", ok); err == nil {
		t.Error("empty entity accepted")
	}
	boom := errors.New("hsm offline")
	if _, _, err := Sign([]byte("x"), "sha-256", func([]byte) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("signer error not wrapped: %v", err)
	}
	if _, _, err := Sign([]byte("x"), "sha-256", func([]byte) ([]byte, error) { return nil, nil }); err == nil {
		t.Error("empty signature accepted")
	}
}

func TestHeaders(t *testing.T) {
	h := sampleReport().Headers()
	want := map[string]string{
		"AS2-From":     "OURID",
		"AS2-To":       `"Partner Co"`,
		"Message-Id":   "<mdn-1@gateway>",
		"AS2-Version":  "1.2",
		"Mime-Version": "1.0",
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if len(h) != len(want) {
		t.Errorf("headers %v", h)
	}
	if got := unquoteAS2ID(`"Partner \"Co\""`); got != `Partner "Co"` {
		t.Errorf("unquote = %q", got)
	}
	if got := quoteAS2ID(`Partner "Co"`); got != `"Partner \"Co\""` {
		t.Errorf("quote = %q", got)
	}
}

func TestMICHelpers(t *testing.T) {
	for in, want := range map[string]string{"sha256": "sha-256", "SHA-256": "sha-256", " sha1 ": "sha-1", "sha-512": "sha-512", "md5": "md5"} {
		if got, ok := CanonicalMICAlg(in); !ok || got != want {
			t.Errorf("CanonicalMICAlg(%q) = %q, %v", in, got, ok)
		}
	}
	if got, ok := CanonicalMICAlg("Whirlpool"); ok || got != "whirlpool" {
		t.Errorf("unknown alg: %q %v", got, ok)
	}
	if h, ok := MICHash("sha384"); !ok || h != crypto.SHA384 {
		t.Errorf("MICHash(sha384) = %v %v", h, ok)
	}
	r := Report{MIC: "O4bvrm5t2YunRfwvZicNdEUmPaPZ9vUslX8loVLDck0=", MICAlg: "sha-256"}
	if !r.MICEquals("O4bvrm5t2YunRfwvZicNdEUmPaPZ9vUslX8loVLDck0=", "sha256") {
		t.Error("equal MIC not equal")
	}
	if r.MICEquals("P4bvrm5t2YunRfwvZicNdEUmPaPZ9vUslX8loVLDck0=", "sha256") {
		t.Error("different MIC equal")
	}
	if r.MICEquals("O4bvrm5t2YunRfwvZicNdEUmPaPZ9vUslX8loVLDck0=", "sha1") {
		t.Error("different algorithm equal")
	}
	if (Report{}).MICEquals("", "sha-256") {
		t.Error("empty MIC equal")
	}
	if !SameMessageID("<a@b>", " a@b ") || SameMessageID("<a@b>", "<a@c>") || SameMessageID("", "") {
		t.Error("SameMessageID")
	}
}

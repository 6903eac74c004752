package xmlenc

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/textproto"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/internal/brainpool"
	"github.com/edigateway/gateway/internal/brainpool/bptest"
)

// RFC 7518 Appendix C: the JWE ECDH-ES example derives its key with the
// Concat KDF of NIST SP 800-56A with SHA-256.
func TestConcatKDFKnownAnswer(t *testing.T) {
	z := []byte{158, 86, 217, 29, 129, 113, 53, 211, 114, 131, 66, 131, 191, 132, 38, 156, 251, 49, 110, 163, 218, 128, 106, 72, 246, 218, 167, 121, 140, 254, 144, 196}
	var other []byte
	other = append(other, 0, 0, 0, 7)
	other = append(other, "A128GCM"...)
	other = append(other, 0, 0, 0, 5)
	other = append(other, "Alice"...)
	other = append(other, 0, 0, 0, 3)
	other = append(other, "Bob"...)
	other = append(other, 0, 0, 0, 128)
	k, err := ConcatKDF(crypto.SHA256, z, other, 16)
	if err != nil {
		t.Fatal(err)
	}
	if got := base64.RawURLEncoding.EncodeToString(k); got != "VqqN6vgjbSBcIijNcacQGg" {
		t.Fatalf("ConcatKDF = %s, want VqqN6vgjbSBcIijNcacQGg", got)
	}
	// Longer than one digest: compare with OpenSSL's SSKDF (SP 800-56C single-step, the same KDF).
	if _, err := exec.LookPath("openssl"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("openssl not installed (CI needs it for the ConcatKDF cross-check)")
		}
		t.Skip("openssl not installed")
	}
	long, _ := ConcatKDF(crypto.SHA256, z, other, 45)
	out := bptest.OpenSSL(t, t.TempDir(), "kdf", "-keylen", "45", "-kdfopt", "digest:SHA256",
		"-kdfopt", "hexkey:"+hex.EncodeToString(z), "-kdfopt", "hexinfo:"+hex.EncodeToString(other), "SSKDF")
	want := strings.ReplaceAll(strings.TrimSpace(string(out)), ":", "")
	if !strings.EqualFold(hex.EncodeToString(long), want) {
		t.Fatalf("ConcatKDF(45) = %x, openssl SSKDF %s", long, want)
	}
	if !bytes.Equal(long[:16], k) {
		t.Fatal("prefix differs")
	}
}

func TestConcatKDFBitString(t *testing.T) {
	el := etree.NewElement("ConcatKDFParams")
	for _, c := range []struct {
		v    string
		want string
		ok   bool
	}{{"", "", true}, {"00", "", true}, {"00414243", "414243", true}, {"04f0", "f0", true},
		{"04f1", "", false}, {"08ff", "", false}, {"01", "", false}, {"zz", "", false}} {
		el.CreateAttr("AlgorithmID", c.v)
		b, err := concatKDFBitString(el, "AlgorithmID")
		if (err == nil) != c.ok || (c.ok && hex.EncodeToString(b) != c.want) {
			t.Errorf("%q: %x, %v", c.v, b, err)
		}
	}
}

// bpKeyPair is a brainpool key with a certificate struct that is enough for
// Encrypt and the SKI reference (no signature: for tests without openssl).
func bpKeyPair(t testing.TB) KeyPair {
	k, err := brainpool.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	spki, _ := brainpool.MarshalPKIXPublicKey(k.PublicKey())
	return KeyPair{Cert: &x509.Certificate{PublicKey: k.PublicKey(), RawSubjectPublicKeyInfo: spki, SubjectKeyId: []byte("ski-" + hex.EncodeToString(k.PublicKey().Bytes()[1:9]))}, Key: k}
}

func bdewAttachment() []Attachment {
	h := textproto.MIMEHeader{}
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-ID", "<edi@example>")
	return []Attachment{{ContentID: "<edi@example>", Header: h, Body: []byte("UNA:+.? 'UNB+UNOC:3+9900000000001:500+9900000000002:500+250101:1200+1'")}}
}

var bdewAlgorithms = []string{AlgKWAES128, AlgECDHES, AlgConcatKDF, AlgSHA256, AlgAES128GCM}

func TestECDHESRoundTrip(t *testing.T) {
	kp := bpKeyPair(t)
	for ref, form := range map[KeyReference]string{ByX509SKI: RefX509SKI, BySubjectKeyID: RefSubjectKeyID} {
		doc := parseDoc(t, testEnvelope)
		enc, err := Encrypt(doc, bdewAttachment(), Recipient{Cert: kp.Cert, Reference: ref}, EncryptOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s, _ := doc.WriteToString()
		for _, want := range []string{AlgECDHES, AlgConcatKDF, brainpool.NamedCurveURI, "ConcatKDFParams", AlgKWAES128, AlgAES128GCM} {
			if !strings.Contains(s, want) {
				t.Fatalf("encrypted message lacks %s", want)
			}
		}
		if ref == ByX509SKI && !strings.Contains(s, "RecipientKeyInfo><ds:X509Data><ds:X509SKI>") {
			t.Fatalf("no X509SKI in RecipientKeyInfo: %s", s)
		}
		other := bpKeyPair(t)
		res, err := Decrypt(parseDoc(t, s), enc, []KeyPair{other, kp}, Options{AllowedAlgorithms: bdewAlgorithms, RequireEncryptedAttachments: true})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(res.Attachments[0].Body, bdewAttachment()[0].Body) {
			t.Fatal("plaintext differs")
		}
		u := res.Keys[0]
		if u.AgreementMethod != AlgECDHES || u.KeyDerivation != AlgConcatKDF || u.KDFDigest != AlgSHA256 || u.Reference != form {
			t.Fatalf("used key %+v", u)
		}
	}
}

func TestECDHESRefusals(t *testing.T) {
	kp := bpKeyPair(t)
	doc := parseDoc(t, testEnvelope)
	enc, err := Encrypt(doc, bdewAttachment(), Recipient{Cert: kp.Cert, Reference: ByX509SKI}, EncryptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	good, _ := doc.WriteToString()
	p256 := "BGsX0fLhLEJH+Lzm5WOkQPJ3A32BLeszoPShOUXYmMKWT+NC4v4af5uO5+tKfA+eFivOM1drMV7Oy7ZAaDe/UfU="
	for name, c := range map[string]struct {
		mutate func(string) string
		code   string
		cause  error
	}{
		"wrong curve": {func(s string) string {
			s = strings.Replace(s, brainpool.NamedCurveURI, "urn:oid:1.2.840.10045.3.1.7", 1)
			return replaceBetween(s, "<dsig11:PublicKey>", "</dsig11:PublicKey>", p256)
		}, CodePolicyNoncompliance, ErrUnsupported},
		"off-curve ephemeral key": {func(s string) string {
			return replaceBetween(s, "<dsig11:PublicKey>", "</dsig11:PublicKey>", base64.StdEncoding.EncodeToString(append([]byte{4}, bytes.Repeat([]byte{1}, 64)...)))
		}, CodeFailedDecryption, ErrMalformed},
		"SHA-1 ConcatKDF": {func(s string) string {
			return strings.Replace(s, `<ds:DigestMethod Algorithm="`+AlgSHA256+`"`, `<ds:DigestMethod Algorithm="`+AlgSHA1+`"`, 1)
		}, CodePolicyNoncompliance, ErrUnsupported},
		"other AlgorithmID": {func(s string) string {
			return strings.Replace(s, `AlgorithmID="00`, `AlgorithmID="0041`, 1)
		}, CodeFailedDecryption, ErrDecrypt},
		"HKDF with ECDH-ES": {func(s string) string {
			return strings.Replace(s, `Algorithm="`+AlgConcatKDF, `Algorithm="`+AlgHKDF, 1)
		}, CodePolicyNoncompliance, ErrUnsupported},
	} {
		t.Run(name, func(t *testing.T) {
			bad := c.mutate(good)
			if bad == good {
				t.Fatal("mutation did not apply")
			}
			_, err := Decrypt(parseDoc(t, bad), enc, []KeyPair{kp}, Options{})
			var e *Error
			if !errors.As(err, &e) || e.Code != c.code || !errors.Is(err, c.cause) {
				t.Fatalf("err = %v, want %s / %v", err, c.code, c.cause)
			}
		})
	}
	// The allow-list of the profile refuses X25519 + HKDF.
	xkp := newX25519KeyPair(t, "x", 3)
	doc = parseDoc(t, testEnvelope)
	enc, _ = Encrypt(doc, bdewAttachment(), Recipient{Cert: xkp.Cert, Reference: BySubjectKeyID}, EncryptOptions{})
	s, _ := doc.WriteToString()
	if _, err := Decrypt(parseDoc(t, s), enc, []KeyPair{xkp, kp}, Options{AllowedAlgorithms: bdewAlgorithms}); !errors.Is(err, ErrPolicy) {
		t.Fatalf("X25519 under the BDEW allow-list: %v", err)
	}
}

func replaceBetween(s, start, end, repl string) string {
	i := strings.Index(s, start)
	j := strings.Index(s[i:], end)
	return s[:i+len(start)] + repl + s[i+j:]
}

// An openssl-built brainpool encryption certificate works as recipient.
func TestECDHESOpenSSLCertificate(t *testing.T) {
	pki := bptest.New(t)
	enc := pki.Issue("enc", "/CN=9900000000002.enc", "keyAgreement")
	doc := parseDoc(t, testEnvelope)
	atts, err := Encrypt(doc, bdewAttachment(), Recipient{Cert: enc.Cert, Reference: ByX509SKI}, EncryptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := doc.WriteToString()
	if !strings.Contains(s, base64.StdEncoding.EncodeToString(enc.Cert.SubjectKeyId)) {
		t.Fatal("SKI of the openssl certificate not written")
	}
	if _, err := Decrypt(parseDoc(t, s), atts, []KeyPair{{Cert: enc.Cert, Key: enc.Key}}, Options{AllowedAlgorithms: bdewAlgorithms}); err != nil {
		t.Fatal(err)
	}
}

// FuzzKeyAgreementMethod feeds arbitrary EncryptedKey structures with an
// ECDH-ES AgreementMethod (ECKeyValue, ConcatKDFParams) to Decrypt with a
// brainpool key. Seeds are messages from Encrypt.
func FuzzKeyAgreementMethod(f *testing.F) {
	kp := bpKeyPair(f)
	doc := parseDoc(f, testEnvelope)
	enc, err := Encrypt(doc, bdewAttachment(), Recipient{Cert: kp.Cert, Reference: ByX509SKI}, EncryptOptions{})
	if err != nil {
		f.Fatal(err)
	}
	s, _ := doc.WriteToString()
	f.Add(s)
	f.Add(strings.Replace(s, "AlgorithmID=\"00", "AlgorithmID=\"07", 1))
	f.Add(strings.Replace(s, "<ds:KeyValue>", "<ds:KeyValue><dsig11:DEREncodedKeyValue>MFowFAYHKoZIzj0CAQYJKyQDAwIIAQEHA0IABAGaLZY3dDpj3a79vKDuIpoWO4CbmxReUxO7643v6rnWVIyvib9bpJSZQEFFZRI0M2QBubKEOlee0VLgkPEbnlk=</dsig11:DEREncodedKeyValue>", 1))
	f.Fuzz(func(t *testing.T, s string) {
		d := etree.NewDocument()
		if d.ReadFromString(s) != nil {
			return
		}
		res, err := Decrypt(d, enc, []KeyPair{kp}, Options{})
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		// A message without encryption left decrypts to itself.
		if len(res.Parts) > 0 && len(res.Keys) == 0 {
			t.Fatal("decrypted parts without a key")
		}
	})
}

// santuarioAcceptsBitString is the rule by which Apache Santuario's ConcatKDF
// (org.apache.xml.security.encryption.keys.content.derivedKey.ConcatKDF,
// parseBitString; WSS4J and phase4 decrypt with it) reads a ConcatKDFParams
// attribute, restated from its documented behaviour: an absent or empty
// value is the empty bit string; otherwise the trimmed value must be at
// least four hex digits ("KeyDerivation.TooShortParameter" below that, so
// the empty bit string "00" of XML Encryption 1.1 §5.4.1 is refused), of
// even length, and start with the octet 00 (padded bit strings are "not
// supported"). XML Encryption 1.1 §5.4.1 itself: "the bit string is
// represented as hexBinary, the first octet giving the number of padding
// bits (0 to 7) in the last octet".
func santuarioAcceptsBitString(v string, present bool) bool {
	v = strings.TrimSpace(v)
	if !present || v == "" {
		return true
	}
	if len(v) < 4 || len(v)%2 != 0 {
		return false
	}
	if _, err := hex.DecodeString(v); err != nil {
		return false
	}
	return v[:2] == "00"
}

func TestSantuarioBitStringRule(t *testing.T) {
	for v, want := range map[string]bool{"": true, "00": false, "0041": true, "0141": false, "004": false, "00414243": true} {
		if got := santuarioAcceptsBitString(v, true); got != want {
			t.Errorf("%q: %v, want %v", v, got, want)
		}
	}
}

// TestECDHESParamsSantuarioAccepts: what we write in ConcatKDFParams passes
// Santuario's bit-string rule (PartyUInfo="00" and PartyVInfo="00" did not),
// and is what WSS4J writes: no PartyUInfo, no PartyVInfo.
func TestECDHESParamsSantuarioAccepts(t *testing.T) {
	kp := bpKeyPair(t)
	doc := parseDoc(t, testEnvelope)
	if _, err := Encrypt(doc, bdewAttachment(), Recipient{Cert: kp.Cert, Reference: ByX509SKI}, EncryptOptions{}); err != nil {
		t.Fatal(err)
	}
	params := doc.FindElement("//ConcatKDFParams")
	if params == nil {
		t.Fatal("no ConcatKDFParams")
	}
	for _, name := range []string{"AlgorithmID", "PartyUInfo", "PartyVInfo", "SuppPubInfo", "SuppPrivInfo"} {
		a := params.SelectAttr(name)
		v := ""
		if a != nil {
			v = a.Value
		}
		if !santuarioAcceptsBitString(v, a != nil) {
			t.Errorf("%s=%q: Santuario refuses it", name, v)
		}
	}
	if params.SelectAttr("PartyUInfo") != nil || params.SelectAttr("PartyVInfo") != nil {
		t.Errorf("PartyUInfo/PartyVInfo written; WSS4J leaves them out")
	}
	if a := params.SelectAttr("AlgorithmID"); a == nil || a.Value != "00"+hex.EncodeToString([]byte(AlgKWAES128)) {
		t.Errorf("AlgorithmID = %v, want 00 and the kw-aes128 URI", a)
	}
}

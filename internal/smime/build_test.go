package smime

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/iotest"

	"github.com/edigateway/gateway/internal/cms"
)

func testPayload() []byte {
	// LF line ends and a trailing LF, like payload.txt: binary CTE must not
	// canonicalise them.
	var b bytes.Buffer
	b.WriteString("UNB+UNOA:2+SENDER:14+RECEIVER:14+260601:1200+42'\n")
	for i := range 50 {
		fmt.Fprintf(&b, "LIN+%d++40000000%05d:EN'\n", i, i)
	}
	b.WriteString("UNZ+1+42'\n")
	b.Write([]byte{0, 0xff, '\r', '\n'})
	return b.Bytes()
}

// httpEntity turns a Built message into the entity a receiver sees: its
// header fields as HTTP headers, its body as the request body.
func httpEntity(b *Built) *Entity {
	h := http.Header{}
	for _, f := range b.Header {
		h.Set(f.Name, f.Value)
	}
	return EntityFromHTTP(h, b.Body)
}

// buildStreamed is BuildStream with the body kept, for the tests of Build.
func buildStreamed(payload []byte, contentType, filename string, opts BuildOptions) (*Built, error) {
	var body bytes.Buffer
	b, err := BuildStream(&body, iotest.OneByteReader(bytes.NewReader(payload)), contentType, filename, opts)
	if err != nil {
		return nil, err
	}
	b.Body = body.Bytes()
	return b, nil
}

// builders are the two ways to build: in memory and as a stream.
var builders = []struct {
	name  string
	build func([]byte, string, string, BuildOptions) (*Built, error)
}{{"Build", Build}, {"BuildStream", buildStreamed}}

// TestBuildUnwrapMatrix covers every combination `gateway send` offers:
// sign {none, sha1, sha256, sha512} x encrypt {none, 3des, aes128-cbc,
// aes256-cbc, aes128-gcm} x compress {none, before sign, after sign}, built
// in memory and as a stream: Unwrap (and, for the stream, UnwrapStream)
// returns the payload, the layers in order and the sender's MIC.
func TestBuildUnwrapMatrix(t *testing.T) {
	sender := newKeyPair(t, "sender", 0)
	receiver := newKeyPair(t, "receiver", 1)
	payload := testPayload()
	opts := Options{Keys: []cms.KeyPair{receiver}, Trusted: []*x509.Certificate{sender.Cert}}

	for _, builder := range builders {
		for _, sign := range []string{"", "sha1", "sha256", "sha512"} {
			for _, enc := range []string{"", "3des", "aes128-cbc", "aes256-cbc", "aes128-gcm"} {
				for _, comp := range []Compression{NoCompression, CompressThenSign, SignThenCompress} {
					name := fmt.Sprintf("%s/sign=%s/enc=%s/comp=%d", builder.name, sign, enc, comp)
					t.Run(name, func(t *testing.T) {
						b, err := builder.build(payload, "application/EDIFACT", "orders.edi", BuildOptions{
							SignCert: sender.Cert, SignKey: sender.Key, SignDigest: sign,
							EncryptCerts: []*x509.Certificate{receiver.Cert}, Cipher: enc,
							Compression: comp,
						})
						if err != nil {
							t.Fatal(err)
						}
						var res *Result
						if builder.name == "BuildStream" {
							var sres *StreamResult
							res, sres = streamBoth(t, httpEntity(b), opts)
							if sign != "" && comp != CompressThenSign && sres.BodySHA256() == nil {
								t.Fatal("the signed payload's SHA-256 was not taken on the way")
							}
						} else if res, err = UnwrapEntity(httpEntity(b), opts); err != nil {
							t.Fatal(err)
						}
						if !bytes.Equal(res.Payload, payload) || res.ContentType != "application/EDIFACT" || res.Filename != "orders.edi" {
							t.Fatalf("payload %d bytes, type %q, filename %q", len(res.Payload), res.ContentType, res.Filename)
						}
						var want []string
						if enc != "" {
							want = append(want, LayerEncrypted)
						}
						if comp == SignThenCompress || (comp != NoCompression && sign == "") {
							want = append(want, LayerCompressed)
						}
						if sign != "" {
							want = append(want, LayerSigned)
							if comp == CompressThenSign {
								want = append(want, LayerCompressed)
							}
						}
						if !slices.Equal(res.Layers, want) {
							t.Fatalf("layers %v, want %v", res.Layers, want)
						}
						mic, err := res.MIC(b.MICAlg)
						if err != nil || mic != b.MIC {
							t.Fatalf("receiver MIC %s (%v), sender MIC %s %s", mic, err, b.MIC, b.MICAlg)
						}
						if sign != "" {
							if res.Signer.DigestAlg != sign || b.MICAlg != micalgNames[sign] {
								t.Fatalf("signer digest %s, MIC alg %s", res.Signer.DigestAlg, b.MICAlg)
							}
							if md, _ := res.MIC(sign); md != base64Std(res.Signer.Digest) {
								t.Fatal("MIC differs from the signature's messageDigest")
							}
						}
						if enc != "" && res.Decryption.Cipher != enc {
							t.Fatalf("cipher %s", res.Decryption.Cipher)
						}
					})
				}
			}
		}
	}
}

func TestBuildOptionsVariants(t *testing.T) {
	sender := newKeyPair(t, "sender", 0)
	receiver := newKeyPair(t, "receiver", 1)
	payload := testPayload()
	opts := Options{Keys: []cms.KeyPair{receiver}, Trusted: []*x509.Certificate{sender.Cert}}
	for _, builder := range builders {
		for _, bo := range []BuildOptions{
			{SignDigest: "sha-384", SignPSS: true},
			{Cipher: "aes256-gcm", OAEP: true},
			{Cipher: "aes192-cbc", OAEP: true, SignDigest: "sha224", TransferEncoding: "base64"},
			{TransferEncoding: "base64", MICAlg: "sha1"},
		} {
			bo.SignCert, bo.SignKey, bo.EncryptCerts = sender.Cert, sender.Key, []*x509.Certificate{receiver.Cert}
			b, err := builder.build(payload, "", "", bo)
			if err != nil {
				t.Fatal(err)
			}
			res, err := UnwrapEntity(httpEntity(b), opts)
			if err != nil {
				t.Fatalf("%+v: %v", bo, err)
			}
			mic, _ := res.MIC(b.MICAlg)
			if !bytes.Equal(res.Payload, payload) || mic != b.MIC || res.ContentType != DefaultContentType {
				t.Fatalf("%+v: payload/MIC/content type mismatch (%s vs %s)", bo, mic, b.MIC)
			}
			if bo.SignPSS && !res.Signer.PSS {
				t.Fatal("PSS not reported")
			}
			if bo.OAEP && res.Decryption.KeyTransport != cms.KeyTransportRSAOAEP {
				t.Fatal("OAEP not reported")
			}
		}
		if _, err := builder.build(payload, "text/plain", "", BuildOptions{SignDigest: "sha256"}); err == nil {
			t.Fatal("signing without a key accepted")
		}
		if _, err := builder.build(payload, "text/plain", "", BuildOptions{TransferEncoding: "uuencode"}); err == nil {
			t.Fatal("unknown transfer encoding accepted")
		}
		if _, err := builder.build(payload, "text/plain", "", BuildOptions{Cipher: "rc2"}); !errors.Is(err, cms.ErrUnsupportedAlgorithm) {
			t.Fatalf("rc2: %v", err)
		}
	}
}

// TestOpenSSLVerifiesBuild: the openssl CLI, an independent implementation,
// verifies and decrypts what Build and BuildStream produce.
func TestOpenSSLVerifiesBuild(t *testing.T) {
	dir := t.TempDir()
	sender := newKeyPair(t, "sender", 0)
	receiver := newKeyPair(t, "receiver", 1)
	senderCert, _ := writeKeyPair(t, dir, "sender", sender)
	recvCert, recvKey := writeKeyPair(t, dir, "receiver", receiver)
	payload := testPayload()

	for _, builder := range builders {
		b, err := builder.build(payload, "application/edifact", "o.edi", BuildOptions{
			SignCert: sender.Cert, SignKey: sender.Key, SignDigest: "sha256",
			EncryptCerts: []*x509.Certificate{receiver.Cert}, Cipher: "aes128-gcm",
		})
		if err != nil {
			t.Fatal(err)
		}
		enc := filepath.Join(dir, "msg.der")
		os.WriteFile(enc, b.Body, 0o600)
		signedEntity := openssl(t, "cms", "-decrypt", "-binary", "-inform", "DER", "-in", enc, "-recip", recvCert, "-inkey", recvKey)
		smimeFile := filepath.Join(dir, "signed.eml")
		os.WriteFile(smimeFile, signedEntity, 0o600)
		// -crlfeol: our framing is CRLF; in -binary mode openssl otherwise keeps
		// the delimiter's CR as content.
		content := openssl(t, "cms", "-verify", "-binary", "-crlfeol", "-in", smimeFile, "-CAfile", senderCert, "-purpose", "any")
		e, err := ParseEntity(content)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(e.Body, payload) {
			t.Fatal(builder.name + ": openssl-verified content differs")
		}
		sum, _ := cms.DigestHash("sha256")
		h := sum.New()
		h.Write(content)
		if base64Std(h.Sum(nil)) != b.MIC {
			t.Fatalf("%s's MIC is not the digest of the content openssl verified", builder.name)
		}
	}
}

// TestOpenSSLAsSender: messages made by the openssl CLI (multipart/signed
// S/MIME with LF framing, enveloped-data with every cipher and OAEP, BER
// streaming) unwrap to the payload with the right MIC.
func TestOpenSSLAsSender(t *testing.T) {
	dir := t.TempDir()
	sender := newKeyPair(t, "sender", 0)
	receiver := newKeyPair(t, "receiver", 1)
	senderCert, senderKey := writeKeyPair(t, dir, "sender", sender)
	recvCert, _ := writeKeyPair(t, dir, "receiver", receiver)
	payload := testPayload()
	entity := append([]byte("Content-Type: application/edifact\r\nContent-Transfer-Encoding: binary\r\n"+
		"Content-Disposition: attachment; filename=\"o.edi\"\r\n\r\n"), payload...)
	entityFile := filepath.Join(dir, "entity.bin")
	os.WriteFile(entityFile, entity, 0o600)
	opts := Options{Keys: []cms.KeyPair{receiver}, Trusted: []*x509.Certificate{sender.Cert}}

	for _, md := range []string{"sha1", "sha256", "sha512"} {
		for _, cipher := range []string{"", "des-ede3-cbc", "aes-128-cbc", "aes-256-cbc", "aes-128-gcm"} {
			for _, oaep := range []bool{false, true} {
				if cipher == "" && oaep {
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/oaep=%v", md, cipher, oaep), func(t *testing.T) {
					signed := openssl(t, "cms", "-sign", "-binary", "-md", md, "-in", entityFile, "-signer", senderCert, "-inkey", senderKey)
					var res *Result
					var err error
					if cipher == "" {
						res, err = Unwrap(signed, opts)
					} else {
						signedFile := filepath.Join(dir, "signed.eml")
						os.WriteFile(signedFile, signed, 0o600)
						args := []string{"cms", "-encrypt", "-binary", "-stream", "-" + cipher, "-in", signedFile, "-outform", "DER", "-recip", recvCert}
						if oaep {
							args = append(args, "-keyopt", "rsa_padding_mode:oaep", "-keyopt", "rsa_oaep_md:sha256")
						}
						body := openssl(t, args...)
						h := http.Header{}
						h.Set("Content-Type", "application/pkcs7-mime; name=smime.p7m") // no smime-type
						res, err = UnwrapEntity(EntityFromHTTP(h, body), opts)
					}
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(res.Payload, payload) || res.Filename != "o.edi" {
						t.Fatalf("payload %d bytes, filename %q", len(res.Payload), res.Filename)
					}
					hash, _ := cms.DigestHash(md)
					d := hash.New()
					d.Write(entity)
					if mic, _ := res.MIC(md); mic != base64Std(d.Sum(nil)) {
						t.Fatal("MIC is not the digest of the signed entity")
					}
					if n, err := NormalizeMICAlg(res.MICAlgParam); err != nil || n != micalgNames[md] {
						t.Fatalf("micalg %q", res.MICAlgParam)
					}
				})
			}
		}
	}

	// Encrypted, unsigned, bare payload (quirk 3) from openssl.
	payloadFile := filepath.Join(dir, "payload.edi")
	os.WriteFile(payloadFile, payload, 0o600)
	body := openssl(t, "cms", "-encrypt", "-binary", "-aes-256-cbc", "-in", payloadFile, "-outform", "DER", "-recip", recvCert)
	h := http.Header{}
	h.Set("Content-Type", "application/pkcs7-mime; smime-type=enveloped-data")
	res, err := UnwrapEntity(EntityFromHTTP(h, body), opts)
	if err != nil {
		t.Fatal(err)
	}
	sum, _ := cms.DigestHash("sha256")
	d := sum.New()
	d.Write(payload)
	if !res.Bare || !bytes.Equal(res.Payload, payload) || res.mustMIC(t, "sha-256") != base64Std(d.Sum(nil)) {
		t.Fatalf("bare %v payload %d", res.Bare, len(res.Payload))
	}
}

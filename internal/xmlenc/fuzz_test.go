package xmlenc

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"io"
	"mime/multipart"
	"net/textproto"
	"os"
	"path/filepath"
	"testing"

	"github.com/beevik/etree"
)

// interopFile reads a vendor vector for fuzz seeding without skipping the
// fuzz target when the vectors are absent.
func interopFile(rel string) []byte {
	dirs := []string{os.Getenv("GATEWAY_INTEROP_DIR"), filepath.Join("..", "..", "..", "shared", "interop")}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(d, rel)); err == nil {
			return b
		}
	}
	return nil
}

// FuzzDecrypt feeds arbitrary SOAP envelopes and one attachment to Decrypt
// with RSA and X25519 keys: it must return a typed error or a result, never
// panic or hang. Seeds are valid messages from Encrypt for those keys, the
// hand-made forms, and the Holodeck vector when present.
func FuzzDecrypt(f *testing.F) {
	rsaKP := newRSAKeyPair(f, "Fuzz RSA", 1)
	xKP := newX25519KeyPair(f, "Fuzz X25519", 2)
	keys := []KeyPair{rsaKP, xKP}

	att := []Attachment{{ContentID: "<fuzz@x>", Header: textproto.MIMEHeader{"Content-Type": {"text/plain"}}, Body: []byte("payload bytes")}}
	for _, rcpt := range []Recipient{
		{Cert: rsaKP.Cert, Reference: ByIssuerSerial},
		{Cert: rsaKP.Cert, Reference: ByBinarySecurityToken},
		{Cert: xKP.Cert, Reference: BySubjectKeyID},
		{Cert: xKP.Cert, Reference: ByThumbprint},
	} {
		doc := parseDoc(f, testEnvelope)
		enc, err := Encrypt(doc, att, rcpt, EncryptOptions{EncryptBody: true})
		if err != nil {
			f.Fatal(err)
		}
		b, _ := doc.WriteToBytes()
		f.Add(b, "fuzz@x", enc[0].Body)
	}
	f.Add([]byte(soap12(`<xenc:EncryptedKey><xenc:EncryptionMethod Algorithm="`+AlgRSAOAEP+`"/></xenc:EncryptedKey>`, "")), "a", []byte{})
	f.Add([]byte(testEnvelope), "x", []byte("x"))

	if raw := interopFile("as4/as4-encrypted-signed-issuerserial.as4"); raw != nil {
		mr := multipart.NewReader(bytes.NewReader(raw), holodeckBoundary)
		var soap []byte
		for {
			p, err := mr.NextRawPart()
			if err != nil {
				break
			}
			var buf bytes.Buffer
			buf.ReadFrom(p)
			if soap == nil {
				soap = buf.Bytes()
				continue
			}
			if buf.Len() < 1024 {
				f.Add(soap, p.Header.Get("Content-ID"), buf.Bytes())
			}
		}
		if b := interopFile("as4/AccessPointB_key.pem"); b != nil {
			keys = append(keys, loadKeyPair(f, interopFile("as4/AccessPointB_cert.pem"), b))
		}
	}

	f.Fuzz(func(t *testing.T, xml []byte, cid string, body []byte) {
		doc := etree.NewDocument()
		doc.ReadSettings = etree.ReadSettings{MaxDepth: 256}
		if err := doc.ReadFromBytes(xml); err != nil {
			return
		}
		atts := []Attachment{{ContentID: cid, Header: textproto.MIMEHeader{}, Body: body}}
		res, err := Decrypt(doc, atts, keys, Options{MaxXMLSize: 1 << 20})
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || (e.Code != CodeFailedDecryption && e.Code != CodePolicyNoncompliance) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if len(res.Attachments) != 1 {
			t.Fatalf("attachments %d", len(res.Attachments))
		}
		if _, err := doc.WriteToBytes(); err != nil {
			t.Fatalf("decrypted document does not serialise: %v", err)
		}
	})
}

// FuzzAttachmentStream feeds arbitrary ciphertext to the streaming
// attachment decrypter (AES-GCM and AES-CBC) and arbitrary plaintext to the
// Attachment-Complete header reader: typed errors or results, never a
// panic; what the decrypter accepts is what the one-shot AEAD accepts.
func FuzzAttachmentStream(f *testing.F) {
	key := bytes.Repeat([]byte{7}, 16)
	f.Add(true, gcmSeal(f, key, []byte("payload bytes")))
	f.Add(false, cbcSeal(f, key, []byte("payload bytes, two blocks long")))
	f.Add(true, []byte("short"))
	f.Add(false, []byte("Content-Type: text/plain\r\n\r\nbody"))
	f.Add(false, []byte("\r\nbody without headers"))
	f.Fuzz(func(t *testing.T, gcm bool, data []byte) {
		pt, err := decryptBytes(key, dataCipher{keyLen: 16, gcm: gcm}, data)
		if err != nil && Code(err) != CodeFailedDecryption {
			t.Fatalf("error without EBMS:0102: %v", err)
		}
		if gcm {
			b, _ := aes.NewCipher(key)
			aead, _ := cipher.NewGCM(b)
			var want []byte
			var werr error = errors.New("too short")
			if len(data) >= 28 {
				want, werr = aead.Open(nil, data[:12], data[12:], nil)
			}
			if (err == nil) != (werr == nil) || err == nil && !bytes.Equal(pt, want) {
				t.Fatalf("stream %x %v, one-shot %x %v", pt, err, want, werr)
			}
		}
		h, rest, err := readInnerHeader(bytes.NewReader(data))
		if err != nil {
			if Code(err) != CodeFailedDecryption {
				t.Fatalf("header error without EBMS:0102: %v", err)
			}
			return
		}
		b, _ := io.ReadAll(rest)
		if h == nil || len(b) > len(data) {
			t.Fatalf("header %v, %d bytes of content from %d", h, len(b), len(data))
		}
	})
}

package xmlenc

import (
	"bytes"
	"crypto"
	"errors"
	"fmt"
	"io"
	"net/textproto"
	"strings"
	"sync/atomic"
	"testing"
)

// countingDecrypter counts the private-key operations of an RSA key.
type countingDecrypter struct {
	crypto.Decrypter
	n *atomic.Int64
}

func (c countingDecrypter) Decrypt(r io.Reader, msg []byte, opts crypto.DecrypterOpts) ([]byte, error) {
	c.n.Add(1)
	return c.Decrypter.Decrypt(r, msg, opts)
}

// TestPrivateKeyOperationsPerMessage: key transport runs before any
// signature check and anybody can encrypt to our certificate, so a message
// with MaxEncryptedKeys EncryptedKeys addressed to us (or naming no key)
// must not cost one RSA private operation each. By default a message gets
// as many private-key operations as we have keys.
func TestPrivateKeyOperationsPerMessage(t *testing.T) {
	var ops atomic.Int64
	mk := func(cn string, serial int64) KeyPair {
		kp := newRSAKeyPair(t, cn, serial)
		kp.Key = countingDecrypter{kp.Key.(crypto.Decrypter), &ops}
		return kp
	}
	current, previous := mk("Receiver", 31), mk("Receiver old", 30)
	keys := []KeyPair{previous, current}
	cek := bytes.Repeat([]byte{4}, 16)
	ek := func(i int, keyInfo string) string {
		return fmt.Sprintf(`<xenc:EncryptedKey Id="EK-%d"><xenc:EncryptionMethod Algorithm="%s"/>%s`+
			`<xenc:CipherData><xenc:CipherValue>%s</xenc:CipherValue></xenc:CipherData>`+
			`<xenc:ReferenceList><xenc:DataReference URI="#ED-1"/></xenc:ReferenceList></xenc:EncryptedKey>`,
			i, AlgRSAOAEPMGF1P, keyInfo, b64(oaep(t, current, cek, crypto.SHA1, crypto.SHA1, nil)))
	}
	ed := `<xenc:EncryptedData Id="ED-1" Type="` + TypeAttachmentContentOnly + `"><xenc:EncryptionMethod Algorithm="` + AlgAES128GCM + `"/>` +
		`<xenc:CipherData><xenc:CipherReference URI="cid:a@x"/></xenc:CipherData></xenc:EncryptedData>`
	atts := func() []Attachment {
		return []Attachment{{ContentID: "<a@x>", Header: textproto.MIMEHeader{"Content-Type": {"application/octet-stream"}}, Body: gcmSeal(t, cek, []byte("hello"))}}
	}
	for _, tc := range []struct {
		name    string
		keyInfo string
	}{
		{"addressed by IssuerSerial", issuerSerialKI(current)},
		{"naming no key", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sec strings.Builder
			for i := range 16 {
				sec.WriteString(ek(i, tc.keyInfo))
			}
			sec.WriteString(ed)
			ops.Store(0)
			_, err := Decrypt(parseDoc(t, soap12(sec.String(), "")), atts(), keys, Options{})
			if !errors.Is(err, ErrLimit) || Code(err) != CodeFailedDecryption {
				t.Errorf("16 EncryptedKeys: %v, want ErrLimit (EBMS:0102)", err)
			}
			if n := ops.Load(); n > int64(len(keys)) {
				t.Errorf("16 EncryptedKeys cost %d RSA private operations, want at most %d", n, len(keys))
			}

			// One EncryptedKey, the AS4 norm, still decrypts, even when it
			// names no key and the previous key is tried first.
			ops.Store(0)
			res, err := Decrypt(parseDoc(t, soap12(ek(0, tc.keyInfo)+ed, "")), atts(), keys, Options{})
			if err != nil {
				t.Fatalf("one EncryptedKey: %v", err)
			}
			if string(res.Attachments[0].Body) != "hello" || res.Keys[0].Cert != current.Cert {
				t.Errorf("one EncryptedKey: body %q, key %v", res.Attachments[0].Body, res.Keys[0].Cert.Subject)
			}
			if n, want := ops.Load(), map[bool]int64{true: 1, false: 2}[tc.keyInfo != ""]; n != want {
				t.Errorf("one EncryptedKey cost %d RSA private operations, want %d", n, want)
			}
		})
	}
}

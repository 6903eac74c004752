package cms

import (
	"bytes"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/smallstep/pkcs7"

	"github.com/edigateway/gateway/internal/testpki"
)

// testContent is binary on purpose: CR, LF, NUL and high bytes must survive
// untouched.
func testContent(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/3)
	}
	copy(b, "Content-Type: application/edi-x12\r\n\r\nISA*00*\n\r\x00\xff")
	return b
}

var opensslCiphers = []struct{ openssl, ours string }{
	{"des-ede3-cbc", Cipher3DES},
	{"aes-128-cbc", CipherAES128CBC},
	{"aes-192-cbc", CipherAES192CBC},
	{"aes-256-cbc", CipherAES256CBC},
	{"aes-128-gcm", CipherAES128GCM},
	{"aes-192-gcm", CipherAES192GCM},
	{"aes-256-gcm", CipherAES256GCM},
}

func TestDecryptOpenSSL(t *testing.T) {
	dir := t.TempDir()
	cert, key := newCert(t, "receiver", 0, certOpts{})
	certPath, _ := testpki.WriteKeyPair(t, dir, "receiver", cert, key)
	old, oldKey := newCert(t, "receiver-old", 1, certOpts{})
	keys := []KeyPair{{Cert: old, Key: oldKey}, {Cert: cert, Key: key}}
	content := testContent(3000)
	in := filepath.Join(dir, "content.bin")
	if err := os.WriteFile(in, content, 0o600); err != nil {
		t.Fatal(err)
	}

	transports := []struct {
		name, kt, oaepHash string
		args               []string
	}{
		{"pkcs1", KeyTransportRSA, "", nil},
		{"oaep-sha1", KeyTransportRSAOAEP, DigestSHA1, []string{"-keyopt", "rsa_padding_mode:oaep"}},
		{"oaep-sha256", KeyTransportRSAOAEP, DigestSHA256, []string{"-keyopt", "rsa_padding_mode:oaep", "-keyopt", "rsa_oaep_md:sha256"}},
	}
	for _, c := range opensslCiphers {
		for _, tr := range transports {
			for _, rid := range []string{"issuer-serial", "keyid", "stream-ber"} {
				name := fmt.Sprintf("%s/%s/%s", c.openssl, tr.name, rid)
				t.Run(name, func(t *testing.T) {
					out := filepath.Join(dir, "enc.der")
					args := []string{"cms", "-encrypt", "-binary", "-" + c.openssl, "-in", in, "-outform", "DER", "-out", out, "-recip", certPath}
					args = append(args, tr.args...)
					switch rid {
					case "keyid":
						args = append(args, "-keyid")
					case "stream-ber":
						args = append(args, "-stream")
					}
					if _, err := openssl(t, args...); err != nil {
						t.Fatal(err)
					}
					der, err := os.ReadFile(out)
					if err != nil {
						t.Fatal(err)
					}
					if rid == "stream-ber" && !bytes.HasPrefix(der, []byte{0x30, 0x80}) {
						t.Fatalf("expected indefinite-length BER from -stream, got % x", der[:4])
					}
					plain, info, err := Decrypt(der, keys)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(plain, content) {
						t.Fatal("plaintext differs")
					}
					wantAuth := c.ours == CipherAES128GCM || c.ours == CipherAES192GCM || c.ours == CipherAES256GCM
					if info.Cipher != c.ours || info.KeyTransport != tr.kt || info.OAEPHash != tr.oaepHash ||
						info.AuthEnveloped != wantAuth || info.Recipient != cert {
						t.Fatalf("info = %+v", info)
					}
				})
			}
		}
	}
}

func TestEncryptOpenSSLDecrypts(t *testing.T) {
	dir := t.TempDir()
	cert, key := newCert(t, "partner", 0, certOpts{})
	certPath, keyPath := testpki.WriteKeyPair(t, dir, "partner", cert, key)
	second, secondKey := newCert(t, "partner-2", 1, certOpts{})
	content := testContent(5000)
	for _, c := range opensslCiphers {
		for _, oaep := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/oaep=%v", c.ours, oaep), func(t *testing.T) {
				der, err := Encrypt(content, []*x509.Certificate{cert, second}, c.ours, oaep)
				if err != nil {
					t.Fatal(err)
				}
				// Both recipients can decrypt with our implementation.
				for _, kp := range []KeyPair{{cert, key}, {second, secondKey}} {
					plain, info, err := Decrypt(der, []KeyPair{kp})
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(plain, content) || info.Cipher != c.ours || (info.KeyTransport == KeyTransportRSAOAEP) != oaep {
						t.Fatalf("round trip: info %+v", info)
					}
				}
				// And independently with openssl.
				in := filepath.Join(dir, "enc.der")
				if err := os.WriteFile(in, der, 0o600); err != nil {
					t.Fatal(err)
				}
				plain, err := openssl(t, "cms", "-decrypt", "-binary", "-inform", "DER", "-in", in, "-recip", certPath, "-inkey", keyPath)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(plain, content) {
					t.Fatalf("openssl plaintext differs (%d bytes)", len(plain))
				}
			})
		}
	}
}

// TestEncryptSmallstepDecrypts cross-checks our EnvelopedData with an
// independent implementation for the ciphers it knows.
func TestEncryptSmallstepDecrypts(t *testing.T) {
	cert, key := newCert(t, "partner", 0, certOpts{})
	content := testContent(777)
	for _, c := range []string{Cipher3DES, CipherAES128CBC, CipherAES256CBC} {
		der, err := Encrypt(content, []*x509.Certificate{cert}, c, false)
		if err != nil {
			t.Fatal(err)
		}
		p7, err := pkcs7.Parse(der)
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		plain, err := p7.Decrypt(cert, key)
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		if !bytes.Equal(plain, content) {
			t.Fatalf("%s: smallstep plaintext differs", c)
		}
	}
}

func TestDecryptErrors(t *testing.T) {
	cert, key := newCert(t, "partner", 0, certOpts{})
	other, otherKey := newCert(t, "other", 1, certOpts{})
	// 31 bytes: CBC pads it with a single 0x01 in its second block.
	content := []byte("UNB+UNOA:2+X+Y'UNH+1+ORDERS:D:'")
	if len(content)%16 != 15 {
		t.Fatalf("content of %d bytes does not end its block one byte short", len(content))
	}
	for _, c := range []string{CipherAES128CBC, CipherAES128GCM} {
		der, err := Encrypt(content, []*x509.Certificate{cert}, c, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := Decrypt(der, []KeyPair{{other, otherKey}}); !errors.Is(err, ErrNoRecipient) {
			t.Fatalf("%s: want ErrNoRecipient, got %v", c, err)
		}
		if _, _, err := Decrypt(der, nil); !errors.Is(err, ErrNoRecipient) {
			t.Fatalf("%s: no keys: want ErrNoRecipient, got %v", c, err)
		}
		// Right certificate, wrong key: implicit rejection continues with a
		// random content key, so GCM always fails and CBC fails its padding
		// except for about one random key in 256, which yields garbage:
		// never the content.
		if got, _, err := Decrypt(der, []KeyPair{{cert, otherKey}}); err == nil && bytes.Equal(got, content) {
			t.Fatalf("%s: the wrong key decrypted the content", c)
		} else if err != nil && !errors.Is(err, ErrDecrypt) || err == nil && c == CipherAES128GCM {
			t.Fatalf("%s: wrong key: want ErrDecrypt, got %v", c, err)
		}
		// A flipped ciphertext bit: GCM authentication or CBC padding fails.
		// GCM: the last byte is the tag's. CBC: the flipped bit is the last
		// of the first block, which CBC XORs into the last plaintext byte of
		// the second: the 0x01 pad becomes 0x00, never valid. (Flipping the
		// last block itself garbles it whole and leaves a valid-looking pad
		// about once in 256 runs.)
		bad := bytes.Clone(der)
		if c == CipherAES128GCM {
			bad[len(bad)-1] ^= 0x01
		} else {
			bad[len(bad)-17] ^= 0x01
		}
		if _, _, err := Decrypt(bad, []KeyPair{{cert, key}}); err == nil {
			t.Fatalf("%s: corrupted message decrypted", c)
		}
	}
	for _, in := range [][]byte{nil, {0x30}, {0x30, 0x80}, []byte("hello"), {0x30, 0x03, 0x06, 0x01, 0x00}} {
		if _, _, err := Decrypt(in, []KeyPair{{cert, key}}); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%x: want ErrMalformed, got %v", in, err)
		}
	}
	signed, err := SignDetached(content, cert, key, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Decrypt(signed, []KeyPair{{cert, key}}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("signed-data: want ErrMalformed, got %v", err)
	}
	if _, err := Encrypt(content, []*x509.Certificate{cert}, "rc2-40", false); !errors.Is(err, ErrUnsupportedAlgorithm) {
		t.Fatalf("rc2: want ErrUnsupportedAlgorithm, got %v", err)
	}
}

func TestSKIRecipientWithoutExtension(t *testing.T) {
	cert, _ := newCert(t, "v1-like", 0, certOpts{noSKI: true})
	if len(cert.SubjectKeyId) != 0 {
		t.Fatal("test certificate unexpectedly has an SKI")
	}
	ski := computedSKI(cert)
	if len(ski) != 20 || !matchSKI(cert, ski) {
		t.Fatal("computed SKI does not match")
	}
	bad := bytes.Clone(ski)
	bad[0] ^= 1
	if matchSKI(cert, bad) || matchSKI(cert, nil) {
		t.Fatal("wrong SKI matched")
	}
}

func TestNormalizeCipher(t *testing.T) {
	for in, want := range map[string]string{
		"3des": Cipher3DES, "DES-EDE3-CBC": Cipher3DES, "tripledes": Cipher3DES,
		"aes128": CipherAES128CBC, "aes-128-cbc": CipherAES128CBC, "AES192_CBC": CipherAES192CBC,
		"aes256-cbc": CipherAES256CBC, "aes-128-gcm": CipherAES128GCM, "aes256_gcm": CipherAES256GCM,
	} {
		got, err := NormalizeCipher(in)
		if err != nil || got != want {
			t.Errorf("NormalizeCipher(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "rc2", "aes-512-cbc", "des"} {
		if _, err := NormalizeCipher(in); !errors.Is(err, ErrUnsupportedAlgorithm) {
			t.Errorf("NormalizeCipher(%q): want ErrUnsupportedAlgorithm, got %v", in, err)
		}
	}
}

func TestDESParity(t *testing.T) {
	k := make([]byte, 24)
	rand.Read(k)
	setDESParity(k)
	for i, b := range k {
		ones := 0
		for v := b; v != 0; v &= v - 1 {
			ones++
		}
		if ones%2 != 1 {
			t.Fatalf("byte %d (%08b) has even parity", i, b)
		}
	}
}

package cms

import (
	"bytes"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
)

// optionalInterop returns an interop vector for seeding fuzz corpora, or nil
// when the vectors are absent (fuzzing must not depend on them).
func optionalInterop(rel string) []byte {
	dir := os.Getenv("GATEWAY_INTEROP_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "shared", "interop")
	}
	b, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		return nil
	}
	return b
}

// optionalCaptureBody is captureBody without failing: the bytes after the
// first empty line.
func optionalCaptureBody(raw []byte) []byte {
	if i := bytes.Index(raw, []byte("\n\r\n")); i >= 0 {
		return raw[i+3:]
	}
	if i := bytes.Index(raw, []byte("\n\n")); i >= 0 {
		return raw[i+2:]
	}
	return nil
}

func FuzzDecrypt(f *testing.F) {
	cert, key := newCert(f, "fuzz", 0, certOpts{})
	for _, c := range []string{Cipher3DES, CipherAES128CBC, CipherAES256GCM} {
		for _, oaep := range []bool{false, true} {
			der, err := Encrypt([]byte("Content-Type: text/plain\r\n\r\nhello"), []*x509.Certificate{cert}, c, oaep)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(der)
		}
	}
	if b := optionalCaptureBody(optionalInterop("as2/mecas2_encrypted.as2")); b != nil {
		f.Add(b)
	}
	f.Add([]byte{0x30, 0x80, 0x00, 0x00})
	keys := []KeyPair{{Cert: cert, Key: key}}
	f.Fuzz(func(t *testing.T, in []byte) {
		plain, info, err := Decrypt(in, keys)
		if err == nil && (info.Cipher == "" || info.KeyTransport == "" || plain == nil && len(in) == 0) {
			t.Fatalf("success without info: %+v", info)
		}
	})
}

func FuzzVerify(f *testing.F) {
	cert, key := newCert(f, "fuzz", 0, certOpts{})
	content := []byte("Content-Type: application/edi-consent\r\n\r\nUNB+UNOA:2'")
	for _, pss := range []bool{false, true} {
		for _, attached := range []bool{false, true} {
			der, err := Sign(content, cert, key, SignOptions{PSS: pss, Attached: attached})
			if err != nil {
				f.Fatal(err)
			}
			f.Add(der, content)
		}
	}
	trusted := []*x509.Certificate{cert}
	f.Fuzz(func(t *testing.T, sig, content []byte) {
		s, err := VerifyDetached(sig, content, trusted, testNow)
		if err == nil && s.Cert != cert {
			t.Fatal("verified by an untrusted certificate")
		}
		got, s, err := VerifyAttached(sig, trusted, testNow)
		if err == nil && (s.Cert != cert || got == nil) {
			t.Fatal("attached verification without content or trusted signer")
		}
		_, _ = Certificates(sig)
		_, _ = ContentType(sig)
	})
}

func FuzzDecompress(f *testing.F) {
	for _, s := range []string{"", "a", "Content-Type: text/plain\r\n\r\nhello hello hello"} {
		der, err := Compress([]byte(s))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(der)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Decompress(in, 1<<20)
		if err == nil && len(out) > 1<<20 {
			t.Fatalf("limit exceeded: %d bytes", len(out))
		}
	})
}

func FuzzBERToDER(f *testing.F) {
	f.Add(unhex("30 80 24 80 04 01 aa 00 00 00 00"))
	f.Add(unhex("23 80 03 02 00 aa 03 02 04 b0 00 00"))
	f.Add(unhex("30 06 02 01 01 04 01 aa"))
	f.Fuzz(func(t *testing.T, in []byte) {
		der, n, err := berToDER(in)
		if err != nil {
			return
		}
		if n > len(in) || n < 2 {
			t.Fatalf("consumed %d of %d", n, len(in))
		}
		// DER output is a fixed point.
		again, m, err := berToDER(der)
		if err != nil || m != len(der) || !bytes.Equal(again, der) {
			t.Fatalf("not idempotent: % x -> % x (%v)", der, again, err)
		}
	})
}

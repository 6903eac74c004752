package cms

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCompressRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 620, 100000} {
		content := testContent(n)
		der, err := Compress(content)
		if err != nil {
			t.Fatal(err)
		}
		if ct, err := ContentType(der); err != nil || ct != TypeCompressedData {
			t.Fatalf("ContentType = %q, %v", ct, err)
		}
		got, err := Decompress(der, int64(n))
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if !bytes.Equal(got, content) {
			t.Fatalf("%d bytes: round trip differs", n)
		}
		if n > 1 { // a limit <= 0 means the default
			if _, err := Decompress(der, int64(n-1)); !errors.Is(err, ErrTooLarge) {
				t.Fatalf("%d bytes, limit n-1: want ErrTooLarge, got %v", n, err)
			}
		}
	}
}

func TestDecompressBomb(t *testing.T) {
	// 256 MiB of zeros compress to about 256 KiB; the limit stops inflation
	// early instead of allocating it all.
	zeros := make([]byte, 1<<20)
	var big bytes.Buffer
	for range 256 {
		big.Write(zeros)
	}
	der, err := Compress(big.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	big.Reset()
	if len(der) > 1<<20 {
		t.Fatalf("compressed bomb is %d bytes", len(der))
	}
	if _, err := Decompress(der, 1<<20); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("want ErrTooLarge, got %v", err)
	}
}

func TestCompressOpenSSL(t *testing.T) {
	dir := t.TempDir()
	content := testContent(3000)
	der, err := Compress(content)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "z.der")
	if err := os.WriteFile(p, der, 0o600); err != nil {
		t.Fatal(err)
	}
	// OpenSSL parses our structure even when built without zlib.
	out, err := openssl(t, "cms", "-cmsout", "-print", "-inform", "DER", "-in", p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"id-smime-ct-compressedData", "1.2.840.113549.1.9.16.3.8", "pkcs7-data"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("openssl print lacks %q:\n%s", want, out)
		}
	}
	// With zlib support it also inflates ours, and we inflate its output.
	plain, err := openssl(t, "cms", "-uncompress", "-binary", "-inform", "DER", "-in", p)
	if err != nil {
		t.Logf("openssl without zlib, skipping the inflate cross-check: %v", err)
		return
	}
	if !bytes.Equal(plain, content) {
		t.Fatal("openssl inflated different content")
	}
	in := filepath.Join(dir, "c.bin")
	os.WriteFile(in, content, 0o600)
	theirs, err := openssl(t, "cms", "-compress", "-binary", "-in", in, "-outform", "DER")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decompress(theirs, 0)
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("Decompress(openssl) = %d bytes, %v", len(got), err)
	}
}

func TestDecompressErrors(t *testing.T) {
	cert, key := newCert(t, "x", 0, certOpts{})
	signed, err := SignDetached([]byte("x"), cert, key, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decompress(signed, 0); !errors.Is(err, ErrMalformed) {
		t.Fatalf("signed-data: want ErrMalformed, got %v", err)
	}
	der, _ := Compress([]byte("hello hello hello hello"))
	// Corrupt the zlib stream (the Adler-32 at the end).
	bad := bytes.Clone(der)
	bad[len(bad)-1] ^= 0xff
	if _, err := Decompress(bad, 0); !errors.Is(err, ErrMalformed) {
		t.Fatalf("corrupt zlib: want ErrMalformed, got %v", err)
	}
}

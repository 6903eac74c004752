package cms

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"crypto/x509"

	"github.com/edigateway/gateway/internal/interop"
	"github.com/edigateway/gateway/internal/limits"
)

// memSink is a Sink in memory.
type memSink struct{ b []byte }

func (m *memSink) Write(p []byte) (int, error) { m.b = append(m.b, p...); return len(p), nil }
func (m *memSink) Truncate(n int64) error      { m.b = m.b[:n]; return nil }
func (m *memSink) Seek(int64, int) (int64, error) {
	return 0, nil
}

// toBER re-encodes DER the way streaming senders do: every constructed
// element with an indefinite length, and OCTET STRINGs and [0] primitive
// contents longer than seg bytes chunked into constructed segments (the
// chunks nested one level further in every other segment).
func toBER(t testing.TB, der []byte, seg int) []byte {
	t.Helper()
	var out []byte
	for len(der) > 0 {
		h, err := parseBERHeader(der)
		if err != nil {
			t.Fatal(err)
		}
		content := der[h.hdrLen : h.hdrLen+h.length]
		id := der[:h.idLen]
		switch {
		case h.constructed:
			out = append(out, id...)
			out = append(out, 0x80)
			out = append(out, toBER(t, content, seg)...)
			out = append(out, 0, 0)
		case (h.class == 0 && h.tag == 4 || h.class == 2 && h.tag == 0) && len(content) > seg:
			out = append(out, id[0]|0x20, 0x80)
			for i := 0; len(content) > 0; i++ {
				k := min(seg, len(content))
				if i%2 == 1 {
					out = append(out, 0x24, 0x80)
					out = appendElement(out, []byte{0x04}, content[:k])
					out = append(out, 0, 0)
				} else {
					out = appendElement(out, []byte{0x04}, content[:k])
				}
				content = content[k:]
			}
			out = append(out, 0, 0)
		default:
			out = append(out, der[:h.hdrLen+h.length]...)
		}
		der = der[h.hdrLen+h.length:]
	}
	return out
}

// DecryptStream yields what Decrypt yields, for every content cipher and
// key transport, DER and chunked indefinite BER, with the other key of a
// rollover listed first; sizes around the block boundaries.
func TestDecryptStreamMatchesDecrypt(t *testing.T) {
	cert, key := newCert(t, "stream", 0, certOpts{})
	other, otherKey := newCert(t, "other", 1, certOpts{})
	keys := []KeyPair{{Cert: other, Key: otherKey}, {Cert: cert, Key: key}}
	for _, cc := range contentCiphers {
		for _, oaep := range []bool{false, true} {
			for _, n := range []int{1, 15, 16, 17, 100_000} {
				content := make([]byte, n)
				rand.Read(content)
				der, err := Encrypt(content, []*x509.Certificate{cert}, cc.name, oaep)
				if err != nil {
					t.Fatal(err)
				}
				for _, in := range [][]byte{der, toBER(t, der, 1000)} {
					want, winfo, err := Decrypt(in, keys)
					if err != nil {
						t.Fatalf("%s: Decrypt: %v", cc.name, err)
					}
					var sink memSink
					info, err := DecryptStream(bytes.NewReader(in), int64(len(in)), keys, &sink)
					if err != nil {
						t.Fatalf("%s oaep=%v n=%d: %v", cc.name, oaep, n, err)
					}
					if !bytes.Equal(sink.b, want) {
						t.Fatalf("%s n=%d: plaintext differs", cc.name, n)
					}
					if info.Cipher != winfo.Cipher || info.KeyTransport != winfo.KeyTransport || info.OAEPHash != winfo.OAEPHash ||
						info.AuthEnveloped != winfo.AuthEnveloped || !info.Recipient.Equal(winfo.Recipient) {
						t.Fatalf("info %+v, Decrypt says %+v", info, winfo)
					}
				}
			}
		}
	}
}

// A changed ciphertext byte (GCM: the tag fails; CBC: the padding, for the
// last block) is refused with ErrDecrypt and leaves no plaintext in the
// sink; so does a truncated message (ErrMalformed).
func TestDecryptStreamDiscardsPlaintextOnFailure(t *testing.T) {
	cert, key := newCert(t, "stream", 0, certOpts{})
	keys := []KeyPair{{Cert: cert, Key: key}}
	content := bytes.Repeat([]byte("confidential "), 20000)
	for _, name := range []string{CipherAES128GCM, CipherAES256CBC} {
		der, err := Encrypt(content, []*x509.Certificate{cert}, name, false)
		if err != nil {
			t.Fatal(err)
		}
		bad := append([]byte(nil), der...)
		switch name {
		case CipherAES128GCM:
			bad[len(bad)/2] ^= 1 // in the middle of the content
		default:
			// The last byte of the next-to-last ciphertext block: it flips
			// the last padding byte (0x10 for this length) to 0xef.
			bad[len(bad)-17] ^= 0xff
		}
		sink := &memSink{}
		_, err = DecryptStream(bytes.NewReader(bad), int64(len(bad)), keys, sink)
		if !errors.Is(err, ErrDecrypt) {
			t.Fatalf("%s: tampered: %v, want ErrDecrypt", name, err)
		}
		if len(sink.b) != 0 {
			t.Fatalf("%s: %d bytes of plaintext left after a failure", name, len(sink.b))
		}
		sink = &memSink{}
		_, err = DecryptStream(bytes.NewReader(der), int64(len(der))-10, keys, sink)
		if !errors.Is(err, ErrMalformed) || len(sink.b) != 0 {
			t.Fatalf("%s: truncated: %v, %d bytes left", name, err, len(sink.b))
		}
	}
}

// The Mendelson interop vector (3DES, BER indefinite) decrypts streaming,
// into a real file.
func TestInteropDecryptStreamMendelson(t *testing.T) {
	body := captureBody(t, interop.Read(t, "as2/mecas2_encrypted.as2"))
	other, otherKey := newCert(t, "other", 0, certOpts{})
	keys := []KeyPair{{Cert: other, Key: otherKey}, pyas2libKeyPair(t)}
	f, err := os.Create(filepath.Join(t.TempDir(), "plain"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, err := DecryptStream(bytes.NewReader(body), int64(len(body)), keys, f)
	if err != nil {
		t.Fatal(err)
	}
	f.Seek(0, io.SeekStart)
	got, _ := io.ReadAll(f)
	want, _, err := Decrypt(body, keys)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) || info.Cipher != Cipher3DES {
		t.Fatalf("plaintext differs or info %+v", info)
	}
}

func TestToBERIsIndefiniteAndChunked(t *testing.T) {
	cert, _ := newCert(t, "stream", 0, certOpts{})
	der, err := Encrypt(make([]byte, 5000), []*x509.Certificate{cert}, CipherAES128CBC, false)
	if err != nil {
		t.Fatal(err)
	}
	ber := toBER(t, der, 1000)
	if !bytes.HasPrefix(ber, []byte{0x30, 0x80}) || !bytes.Contains(ber, []byte{0xa0, 0x80, 0x04, 0x82, 0x03, 0xe8}) ||
		!bytes.Contains(ber, []byte{0x24, 0x80, 0x04, 0x82, 0x03, 0xe8}) {
		t.Fatalf("not the BER the tests mean: % x", ber[:32])
	}
}

// VerifyDetachedStream agrees with VerifyDetached (PKCS#1 v1.5 and PSS,
// detached and attached signatures), refuses changed content with
// ErrBadSignature and reads the content once.
func TestVerifyDetachedStreamMatchesVerifyDetached(t *testing.T) {
	cert, key := newCert(t, "signer", 0, certOpts{})
	trusted := []*x509.Certificate{cert}
	content := bytes.Repeat([]byte("Content-Type: application/edi-consent\r\n\r\nUNB+UNOA:2'\r\n"), 5000)
	for _, pss := range []bool{false, true} {
		for _, attached := range []bool{false, true} {
			sig, err := Sign(content, cert, key, SignOptions{PSS: pss, Attached: attached})
			if err != nil {
				t.Fatal(err)
			}
			want, err := VerifyDetached(sig, content, trusted, testNow)
			if err != nil {
				t.Fatal(err)
			}
			got, n, err := VerifyDetachedStream(sig, bytes.NewReader(content), trusted, testNow)
			if err != nil {
				t.Fatalf("pss=%v attached=%v: %v", pss, attached, err)
			}
			if n != int64(len(content)) || got.Cert != want.Cert || got.DigestAlg != want.DigestAlg ||
				!bytes.Equal(got.Digest, want.Digest) || got.PSS != want.PSS {
				t.Fatalf("signer %+v, VerifyDetached says %+v", got, want)
			}
			bad := append([]byte(nil), content...)
			bad[len(bad)/2] ^= 1
			if _, _, err := VerifyDetachedStream(sig, bytes.NewReader(bad), trusted, testNow); !errors.Is(err, ErrBadSignature) {
				t.Fatalf("changed content: %v", err)
			}
		}
	}
}

// DecompressStream yields what DecompressLimited yields for DER and chunked
// BER, keeps its caps (absolute size, ratio) while streaming, stopping
// within a chunk of the limit, and refuses a corrupt stream as malformed.
func TestDecompressStream(t *testing.T) {
	data := make([]byte, 3<<20)
	rng := mrand.New(mrand.NewPCG(3, 4))
	for i := range data {
		data[i] = "ABCDEFGH 0123456789\r\n"[rng.IntN(21)]
	}
	der, err := Compress(data)
	if err != nil {
		t.Fatal(err)
	}
	lim := limits.Inflation{MaxBytes: 64 << 20, MaxRatio: 200}
	for _, in := range [][]byte{der, toBER(t, der, 4096)} {
		var out bytes.Buffer
		n, err := DecompressStream(bytes.NewReader(in), int64(len(in)), &out, lim, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n != int64(len(data)) || !bytes.Equal(out.Bytes(), data) {
			t.Fatalf("inflated %d bytes, want %d", n, len(data))
		}
	}
	// Caps while streaming.
	var out countWriter
	if _, err := DecompressStream(bytes.NewReader(der), int64(len(der)), &out, limits.Inflation{MaxBytes: 1 << 20}, nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over MaxBytes: %v", err)
	}
	if out.n > 1<<20 {
		t.Fatalf("%d bytes written past a 1 MiB cap", out.n)
	}
	zeros, err := Compress(make([]byte, 64<<20))
	if err != nil {
		t.Fatal(err)
	}
	out = countWriter{}
	if _, err := DecompressStream(bytes.NewReader(zeros), int64(len(zeros)), &out, limits.Inflation{MaxRatio: 200}, nil); !errors.Is(err, ErrTooLarge) || !errors.Is(err, limits.ErrRatio) {
		t.Fatalf("ratio: %v", err)
	}
	if out.n > int64(200*len(zeros))+limits.DefaultRatioFloor+limits.ChunkSize {
		t.Fatalf("%d bytes written past the ratio cap", out.n)
	}
	stop := errors.New("layers in total")
	if _, err := DecompressStream(bytes.NewReader(der), int64(len(der)), &countWriter{}, lim, func(total int64) error {
		if total > 1<<20 {
			return stop
		}
		return nil
	}); !errors.Is(err, stop) {
		t.Fatalf("check: %v", err)
	}
	bad := append([]byte(nil), der...)
	for i := len(bad) / 2; i < len(bad)/2+64; i++ {
		bad[i] ^= 0x5a
	}
	if _, err := DecompressStream(bytes.NewReader(bad), int64(len(bad)), &countWriter{}, lim, nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("corrupt: %v", err)
	}
	if _, err := DecompressStream(bytes.NewReader(der), int64(len(der))-100, &countWriter{}, lim, nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated: %v", err)
	}
}

type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// What EncryptStream and CompressStream write (indefinite BER, segmented
// content) is read back by Decrypt, DecryptStream, DecompressLimited and
// DecompressStream, for every cipher and sizes around the boundaries.
func TestStreamWritersRoundTrip(t *testing.T) {
	cert, key := newCert(t, "stream", 0, certOpts{})
	keys := []KeyPair{{Cert: cert, Key: key}}
	for _, n := range []int{0, 1, 16, segmentSize - 1, segmentSize + 17, 3*segmentSize + 5} {
		content := make([]byte, n)
		rand.Read(content)
		for _, cc := range contentCiphers {
			var out bytes.Buffer
			w, err := EncryptStream(&out, []*x509.Certificate{cert}, cc.name, true)
			if err != nil {
				t.Fatal(err)
			}
			for rest := content; len(rest) > 0; {
				k := min(len(rest), 1000+len(rest)%7000)
				w.Write(rest[:k])
				rest = rest[k:]
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				continue // Decrypt refuses empty CBC content as Encrypt never makes it; GCM checked below
			}
			got, info, err := Decrypt(out.Bytes(), keys)
			if err != nil || !bytes.Equal(got, content) || info.Cipher != cc.name {
				t.Fatalf("%s n=%d: Decrypt: %v", cc.name, n, err)
			}
			var sink memSink
			if _, err := DecryptStream(bytes.NewReader(out.Bytes()), int64(out.Len()), keys, &sink); err != nil || !bytes.Equal(sink.b, content) {
				t.Fatalf("%s n=%d: DecryptStream: %v", cc.name, n, err)
			}
		}
		var out bytes.Buffer
		w, err := CompressStream(&out)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(content)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		got, err := DecompressLimited(out.Bytes(), limits.Inflation{MaxBytes: 1 << 30}, nil)
		if err != nil || !bytes.Equal(got, content) {
			t.Fatalf("n=%d: DecompressLimited: %v", n, err)
		}
		var b bytes.Buffer
		if _, err := DecompressStream(bytes.NewReader(out.Bytes()), int64(out.Len()), &b, limits.Inflation{MaxBytes: 1 << 30}, nil); err != nil || !bytes.Equal(b.Bytes(), content) {
			t.Fatalf("n=%d: DecompressStream: %v", n, err)
		}
	}
}

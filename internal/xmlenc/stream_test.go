package xmlenc

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	mrand "math/rand/v2"
	"testing"
	"testing/iotest"
)

// The streaming decrypter gives the one-shot result for every length around
// the block and chunk sizes, read one byte at a time or in big pieces, and
// fails at the end on a flipped bit, a cut tag or a cut block.
func TestCipherReaderMatchesOneShot(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(5, 6))
	key := make([]byte, 16)
	rand.Read(key)
	for _, gcm := range []bool{true, false} {
		seal := cbcSeal
		if gcm {
			seal = gcmSeal
		}
		dc := dataCipher{keyLen: 16, gcm: gcm}
		for _, n := range []int{0, 1, 15, 16, 17, cipherChunk - 1, cipherChunk, cipherChunk + 1, 3*cipherChunk + 5} {
			pt := make([]byte, n)
			rand.Read(pt)
			ct := seal(t, key, pt)
			for _, oneByte := range []bool{false, true} {
				var src io.Reader = bytes.NewReader(ct)
				if oneByte {
					if n > 2*cipherChunk {
						continue
					}
					src = iotest.OneByteReader(src)
				}
				r, err := newCipherReader(key, dc, src)
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(r)
				if err != nil || !bytes.Equal(got, pt) {
					t.Fatalf("gcm=%v n=%d: %d bytes, %v", gcm, n, len(got), err)
				}
			}
			bad := bytes.Clone(ct)
			bad[rng.IntN(len(bad))] ^= 1 << rng.IntN(8)
			if _, err := decryptBytes(key, dc, bad); gcm && !errors.Is(err, ErrDecrypt) {
				t.Fatalf("gcm n=%d: a flipped bit passed: %v", n, err)
			}
			if _, err := decryptBytes(key, dc, ct[:len(ct)-1]); !errors.Is(err, ErrDecrypt) {
				t.Fatalf("gcm=%v n=%d: cut ciphertext: %v", gcm, n, err)
			}
		}
	}
}

// With Options.Store the attachment plaintext is handed over as a stream;
// a wrong GCM tag reaches Store as an *Error at the end of the stream and
// Decrypt returns it (EBMS:0102), a failure of Store itself is returned as
// it is.
func TestDecryptStoreStreams(t *testing.T) {
	me := newRSAKeyPair(t, "Receiver AP", 4711)
	atts := testAttachments()
	doc := parseDoc(t, testEnvelope)
	enc, err := Encrypt(doc, atts, Recipient{Cert: me.Cert}, EncryptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wire, _ := doc.WriteToString()
	opened := func(b []byte) func() (io.ReadCloser, error) {
		return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	src := make([]Attachment, len(enc))
	for i, a := range enc {
		src[i] = Attachment{ContentID: a.ContentID, Header: a.Header, Open: opened(a.Body)}
	}
	store := func(_ Attachment, r io.Reader) (func() (io.ReadCloser, error), error) {
		b, err := io.ReadAll(iotest.HalfReader(r))
		if err != nil {
			return nil, err
		}
		return opened(b), nil
	}
	res, err := Decrypt(parseDoc(t, wire), src, []KeyPair{me}, Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range res.Attachments {
		rc, _ := a.Open()
		got, _ := io.ReadAll(rc)
		if a.Body != nil || !bytes.Equal(got, atts[i].Body) || a.Header.Get("Content-Type") != atts[i].Header.Get("Content-Type") {
			t.Fatalf("attachment %d: %d bytes, Content-Type %q", i, len(got), a.Header.Get("Content-Type"))
		}
	}
	bad := bytes.Clone(enc[0].Body)
	bad[len(bad)-1] ^= 1
	src[0].Open = opened(bad)
	if _, err := Decrypt(parseDoc(t, wire), src, []KeyPair{me}, Options{Store: store}); !errors.Is(err, ErrDecrypt) || Code(err) != CodeFailedDecryption {
		t.Fatalf("wrong tag: %v", err)
	}
	src[0].Open = opened(enc[0].Body)
	disk := errors.New("disk full")
	_, err = Decrypt(parseDoc(t, wire), src, []KeyPair{me}, Options{Store: func(Attachment, io.Reader) (func() (io.ReadCloser, error), error) { return nil, disk }})
	if !errors.Is(err, disk) || Code(err) != "" {
		t.Fatalf("store failure: %v", err)
	}
}

// An attachment given by Open is encrypted as it is read, once: the
// ciphertext decrypts to the content, and a second read is refused (its IV
// must not serve twice).
func TestEncryptStreamsOnce(t *testing.T) {
	me := newRSAKeyPair(t, "Receiver AP", 4712)
	atts := testAttachments()
	src := make([]Attachment, len(atts))
	for i, a := range atts {
		body := a.Body
		src[i] = Attachment{ContentID: a.ContentID, Header: a.Header, Open: func() (io.ReadCloser, error) {
			return io.NopCloser(iotest.OneByteReader(bytes.NewReader(body))), nil
		}}
	}
	doc := parseDoc(t, testEnvelope)
	enc, err := Encrypt(doc, src, Recipient{Cert: me.Cert}, EncryptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wire, _ := doc.WriteToString()
	for i := range enc {
		rc, err := enc[i].Open()
		if err != nil {
			t.Fatal(err)
		}
		enc[i].Body, _ = io.ReadAll(rc)
		enc[i].Open = nil
		if _, err := src[i].Open(); err != nil {
			t.Fatal(err)
		}
	}
	res, err := Decrypt(parseDoc(t, wire), enc, []KeyPair{me}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range res.Attachments {
		if !bytes.Equal(a.Body, atts[i].Body) {
			t.Fatalf("attachment %d differs", i)
		}
	}
	enc2, _ := Encrypt(parseDoc(t, testEnvelope), src[:1], Recipient{Cert: me.Cert}, EncryptOptions{})
	rc, _ := enc2[0].Open()
	rc.Close()
	if _, err := enc2[0].Open(); err == nil {
		t.Fatal("a stream-encrypted attachment was read twice")
	}
}

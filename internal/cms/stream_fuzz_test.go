package cms

import (
	"bytes"
	"crypto/x509"
	"encoding/asn1"

	"github.com/edigateway/gateway/internal/limits"
	"testing"
)

// FuzzBERStream: the streaming reader accepts every element the in-memory
// normaliser accepts, consuming exactly the same bytes, and streams an
// OCTET STRING's value (primitive or chunked to any depth) as the
// normaliser's DER holds it.
func FuzzBERStream(f *testing.F) {
	cert, _ := newCert(f, "fuzz", 0, certOpts{})
	for _, c := range []string{Cipher3DES, CipherAES128GCM} {
		der, err := Encrypt([]byte("Content-Type: text/plain\r\n\r\nhello stream"), []*x509.Certificate{cert}, c, false)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(der)
		f.Add(toBER(f, der, 3))
	}
	f.Add([]byte{0x24, 0x80, 0x04, 0x02, 'a', 'b', 0x24, 0x80, 0x04, 0x01, 'c', 0x00, 0x00, 0x00, 0x00})
	f.Add([]byte{0x04, 0x81, 0x03, 'x', 'y', 'z'})
	f.Add([]byte{0x30, 0x80, 0x30, 0x80, 0x00, 0x00, 0x00, 0x00})
	if b := optionalCaptureBody(optionalInterop("as2/mecas2_encrypted.as2")); b != nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		s := newBERStream(bytes.NewReader(in))
		h, herr := s.next()
		var raw []byte
		var rerr error
		if herr == nil {
			raw, rerr = s.readRaw(h, 1<<20)
		}
		der, n, derr := berToDER(in)
		if derr == nil {
			if herr != nil || rerr != nil {
				t.Fatalf("normaliser accepts %d bytes, the stream refuses: %v %v", n, herr, rerr)
			}
			if len(raw) != n {
				t.Fatalf("stream consumed %d bytes, the normaliser %d", len(raw), n)
			}
		}
		if rerr == nil && herr == nil && !bytes.Equal(raw, in[:len(raw)]) {
			t.Fatal("readRaw does not return the bytes as sent")
		}
		if derr != nil || h.class != 0 || h.tag != 4 {
			return
		}
		var want []byte
		if _, err := asn1.Unmarshal(der, &want); err != nil {
			return
		}
		s = newBERStream(bytes.NewReader(in))
		h, _ = s.next()
		var got bytes.Buffer
		if err := s.octets(h, &got); err != nil {
			t.Fatalf("streaming an OCTET STRING the normaliser accepts: %v", err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("streamed %q, the normaliser has %q", got.Bytes(), want)
		}
	})
}

// FuzzDecryptStream: no panic; a failure leaves no plaintext; a success
// with deterministic key transport (OAEP: PKCS#1 v1.5 rejects implicitly
// with a random key) yields what Decrypt yields.
func FuzzDecryptStream(f *testing.F) {
	cert, key := newCert(f, "fuzz", 0, certOpts{})
	for _, c := range []string{Cipher3DES, CipherAES128CBC, CipherAES256GCM} {
		for _, oaep := range []bool{false, true} {
			der, err := Encrypt([]byte("Content-Type: text/plain\r\n\r\nhello"), []*x509.Certificate{cert}, c, oaep)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(der)
			f.Add(toBER(f, der, 4))
		}
	}
	if b := optionalCaptureBody(optionalInterop("as2/mecas2_encrypted.as2")); b != nil {
		f.Add(b)
	}
	f.Add([]byte{0x30, 0x80, 0x00, 0x00})
	keys := []KeyPair{{Cert: cert, Key: key}}
	f.Fuzz(func(t *testing.T, in []byte) {
		sink := &memSink{}
		info, err := DecryptStream(bytes.NewReader(in), int64(len(in)), keys, sink)
		if err != nil {
			if len(sink.b) != 0 {
				t.Fatalf("%d bytes of plaintext left after %v", len(sink.b), err)
			}
			return
		}
		if info.Cipher == "" || info.KeyTransport == "" {
			t.Fatalf("success without info: %+v", info)
		}
		if info.KeyTransport != KeyTransportRSAOAEP {
			return
		}
		want, _, derr := Decrypt(in, keys)
		if derr == nil && !bytes.Equal(want, sink.b) {
			t.Fatal("DecryptStream and Decrypt disagree")
		}
	})
}

// FuzzDecompressStream: no panic, the caps hold while streaming, and what
// DecompressLimited inflates DecompressStream inflates the same.
func FuzzDecompressStream(f *testing.F) {
	for _, s := range []string{"", "hello", "Content-Type: text/plain\r\n\r\nhello hello hello hello"} {
		der, err := Compress([]byte(s))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(der)
		f.Add(toBER(f, der, 3))
	}
	lim := limits.Inflation{MaxBytes: 1 << 20, MaxRatio: 200}
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		n, err := DecompressStream(bytes.NewReader(in), int64(len(in)), &out, lim, nil)
		if int64(out.Len()) != n || n > lim.MaxBytes+limits.ChunkSize {
			t.Fatalf("wrote %d, reports %d", out.Len(), n)
		}
		want, werr := DecompressLimited(in, lim, nil)
		if werr == nil && (err != nil || !bytes.Equal(out.Bytes(), want)) {
			t.Fatalf("DecompressLimited inflates %d bytes, DecompressStream: %v", len(want), err)
		}
	})
}

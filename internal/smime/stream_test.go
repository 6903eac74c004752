package smime

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/interop"
)

// streamBoth unwraps the entity in memory and as a stream and fails the
// test where the results differ: layers, flags, signer, decryption, content
// type, filename, payload bytes, MIC under several digests, error class.
func streamBoth(t *testing.T, e *Entity, opts Options) (*Result, *StreamResult) {
	t.Helper()
	return streamBothFrom(t, e, opts, func(r io.ReaderAt) io.ReaderAt { return r })
}

// streamBothFrom is streamBoth with the streamed body read through src.
func streamBothFrom(t *testing.T, e *Entity, opts Options, src func(io.ReaderAt) io.ReaderAt) (*Result, *StreamResult) {
	t.Helper()
	dir := t.TempDir()
	mem, merr := UnwrapEntity(e, opts)
	sres, serr := UnwrapStream(e.Header, Section{R: src(bytes.NewReader(e.Body)), N: int64(len(e.Body))}, StreamOptions{
		Options: opts, NewFile: func() (*os.File, error) { return os.CreateTemp(dir, "layer-*") },
	})
	if errors.Is(serr, ErrNotStreamable) {
		t.Fatalf("not streamable: %v", serr)
	}
	if (merr == nil) != (serr == nil) {
		t.Fatalf("in memory: %v; stream: %v", merr, serr)
	}
	for _, sentinel := range []error{cms.ErrBadSignature, cms.ErrDecrypt, cms.ErrNoRecipient, cms.ErrUnknownSigner,
		cms.ErrCertificateExpired, cms.ErrTooLarge, cms.ErrMalformed, ErrMalformedMIME, cms.ErrUnsupportedAlgorithm} {
		if errors.Is(merr, sentinel) != errors.Is(serr, sentinel) {
			t.Fatalf("error class differs for %v: in memory %v; stream %v", sentinel, merr, serr)
		}
	}
	if !slices.Equal(mem.Layers, sres.Layers) || mem.Signed != sres.Signed || mem.Encrypted != sres.Encrypted ||
		mem.Compressed != sres.Compressed || mem.Bare != sres.Bare || mem.LineEndingsRepaired != sres.LineEndingsRepaired ||
		mem.Decryption.Cipher != sres.Decryption.Cipher {
		t.Fatalf("in memory %+v\nstream %+v", mem, sres.Result)
	}
	if merr != nil {
		return mem, sres
	}
	if mem.ContentType != sres.ContentType || mem.MediaType != sres.MediaType || mem.Filename != sres.Filename ||
		mem.MICAlgParam != sres.MICAlgParam {
		t.Fatalf("metadata: in memory %q %q %q %q; stream %q %q %q %q", mem.ContentType, mem.MediaType, mem.Filename, mem.MICAlgParam,
			sres.ContentType, sres.MediaType, sres.Filename, sres.MICAlgParam)
	}
	if mem.Signed && (mem.Signer.Cert != sres.Signer.Cert || mem.Signer.DigestAlg != sres.Signer.DigestAlg) {
		t.Fatalf("signer %+v vs %+v", mem.Signer, sres.Signer)
	}
	got, err := io.ReadAll(sres.Body.Reader())
	if err != nil || !bytes.Equal(got, mem.Payload) {
		t.Fatalf("payload: %d bytes streamed, %d in memory (%v)", len(got), len(mem.Payload), err)
	}
	if sum := sres.BodySHA256(); sum != nil {
		if want := sha256.Sum256(got); !bytes.Equal(sum, want[:]) {
			t.Fatal("the payload's SHA-256 taken on the way is wrong")
		}
	}
	for _, alg := range []string{"sha1", "sha256", "sha-512"} {
		a, _ := mem.MIC(alg)
		b, err := sres.MIC(alg)
		if err != nil || a != b {
			t.Fatalf("MIC(%s): in memory %s, stream %s (%v)", alg, a, b, err)
		}
	}
	return mem, sres
}

// The Mendelson vectors (signed, compressed, 3DES BER, signed+encrypted)
// give the same results streamed, and so does the signed vector as
// stored, which verifies only through the line-ending repair.
func TestUnwrapStreamInteropVectors(t *testing.T) {
	payload := interop.Read(t, "as2/payload.txt")
	for _, file := range []string{"mecas2_signed.as2", "mecas2_compressed.as2", "mecas2_encrypted.as2", "mecas2_signed_encrypted.as2"} {
		t.Run(file, func(t *testing.T) {
			raw := interop.Read(t, "as2/"+file)
			e, err := ParseEntity(raw)
			if err != nil {
				t.Fatal(err)
			}
			mem, _ := streamBoth(t, e, interopOptions(t))
			if !bytes.Equal(mem.Payload, payload) {
				t.Fatal("payload differs from payload.txt")
			}
			if file == "mecas2_signed.as2" && !mem.LineEndingsRepaired {
				t.Fatal("the as-stored vector is expected to need the line-ending repair")
			}
		})
	}
	raw := interop.Read(t, "as2/mecas2_signed_encrypted.as2")
	e, _ := ParseEntity(raw)
	streamBoth(t, e, Options{Trusted: mendelsonCerts(t)}) // no key: ErrNoRecipient on both
}

// streamParties makes the sender, the receiver, a third party and the
// receiver's options (its key, the sender trusted).
func streamParties(t *testing.T) (sender, receiver, other cms.KeyPair, opts Options) {
	t.Helper()
	sender, receiver, other = newKeyPair(t, "sender", 0), newKeyPair(t, "receiver", 1), newKeyPair(t, "other", 2)
	return sender, receiver, other, Options{Keys: []cms.KeyPair{receiver}, Trusted: []*x509.Certificate{sender.Cert}}
}

// Every combination `gateway send` builds (sign × encrypt × compress ×
// transfer encoding), a payload of several buffers with bare LFs, and the
// failures (tampered signature content, untrusted signer, wrong key, a
// signed part whose CRLFs a proxy turned into LF) agree streamed and in
// memory.
func TestUnwrapStreamMatchesUnwrap(t *testing.T) {
	sender, receiver, other, opts := streamParties(t)
	payload := bytes.Repeat(testPayload(), 400) // ~600 KB
	for _, sign := range []string{"", "sha1", "sha256"} {
		for _, enc := range []string{"", "3des", "aes256-cbc", "aes128-gcm"} {
			for _, comp := range []Compression{NoCompression, CompressThenSign, SignThenCompress} {
				for _, te := range []string{"binary", "base64"} {
					t.Run(fmt.Sprintf("sign=%s/enc=%s/comp=%d/%s", sign, enc, comp, te), func(t *testing.T) {
						b, err := Build(payload, "application/EDIFACT", "orders.edi", BuildOptions{
							SignCert: sender.Cert, SignKey: sender.Key, SignDigest: sign,
							EncryptCerts: []*x509.Certificate{receiver.Cert}, Cipher: enc,
							Compression: comp, TransferEncoding: te,
						})
						if err != nil {
							t.Fatal(err)
						}
						mem, _ := streamBoth(t, httpEntity(b), opts)
						if !bytes.Equal(mem.Payload, payload) {
							t.Fatal("payload differs")
						}
						trunc := httpEntity(b)
						trunc.Body = trunc.Body[:len(trunc.Body)/2]
						streamBoth(t, trunc, opts)
						streamBoth(t, httpEntity(b), Options{Keys: []cms.KeyPair{other}, Trusted: []*x509.Certificate{sender.Cert}})
						streamBoth(t, httpEntity(b), Options{Keys: []cms.KeyPair{receiver}, Trusted: []*x509.Certificate{other.Cert}})
						if sign != "" && enc == "" && comp == NoCompression && te == "binary" {
							bad := httpEntity(b)
							bad.Body = bytes.Clone(bad.Body)
							i := bytes.Index(bad.Body, []byte("LIN+7+"))
							bad.Body[i+4] = '8'
							if _, err := UnwrapEntity(bad, opts); !errors.Is(err, cms.ErrBadSignature) {
								t.Fatalf("tampered: %v", err)
							}
							streamBoth(t, bad, opts)
						}
						if sign != "" && enc == "" && comp != SignThenCompress {
							lf := httpEntity(b)
							lf.Body = bytes.ReplaceAll(lf.Body, []byte("\r\n"), []byte("\n"))
							streamBoth(t, lf, opts)
						}
					})
				}
			}
		}
	}
}

// A base64 body whose text goes on after its padding is not decoded past
// it by the stream: it says ErrNotStreamable, and the caller's in-memory
// fallback gives the in-memory answer.
func TestUnwrapStreamBase64PastPadding(t *testing.T) {
	hdr := Header{{Name: "Content-Type", Value: "application/edi-consent"}, {Name: "Content-Transfer-Encoding", Value: "base64"}}
	body := []byte("aGVsbG8=\r\nd29ybGQ=\r\n")
	dir := t.TempDir()
	_, err := UnwrapStream(hdr, Section{R: bytes.NewReader(body), N: int64(len(body))}, StreamOptions{
		NewFile: func() (*os.File, error) { return os.CreateTemp(dir, "layer-*") },
	})
	if !errors.Is(err, ErrNotStreamable) {
		t.Fatalf("got %v, want ErrNotStreamable", err)
	}
	// The fallback gives the in-memory answer: malformed.
	if _, err := UnwrapEntity(&Entity{Header: hdr, Body: body}, Options{}); !errors.Is(err, ErrMalformedMIME) {
		t.Fatalf("in memory: %v, want ErrMalformedMIME", err)
	}
}

// slowReaderAt delays every read, so that the inflater of a compressed layer
// is still writing when the layer's header is read.
type slowReaderAt struct{ r io.ReaderAt }

func (s slowReaderAt) ReadAt(p []byte, off int64) (int, error) {
	time.Sleep(200 * time.Microsecond)
	return s.r.ReadAt(p, off)
}

// A signed-then-compressed message whose multipart/signed layer is split and
// hashed while it is inflated agrees with the in-memory unwrap: the payload,
// its SHA-256 and MIC on success; the error class and layers when the
// signer is not trusted, the body is cut, or the inflated layer passes
// MaxSize (the inflater's refusal is the reason, not the cut layer's).
func TestUnwrapStreamVerifiesWhileInflating(t *testing.T) {
	sender, receiver, other, opts := streamParties(t)
	// ~4.5 MB of EDI-like lines carrying seeded random text: it compresses
	// to about 3 MB, so that the inflater reads many blocks through the
	// slow reader and is still writing when the layer's header is read
	// (a payload of repeated lines compressed to a few KB and the inflater
	// could end first on a loaded machine: then the sequential path ran and
	// this test failed about once in ten full runs).
	rng := rand.New(rand.NewPCG(7, 9))
	var pb bytes.Buffer
	pb.Write(testPayload())
	line := make([]byte, 60)
	for pb.Len() < 4_500_000 {
		for i := range line {
			line[i] = 'A' + byte(rng.IntN(26))
		}
		fmt.Fprintf(&pb, "FTX+AAI+++%s'\n", line)
	}
	payload := pb.Bytes()
	for _, enc := range []string{"", "aes128-gcm"} {
		t.Run("enc="+enc, func(t *testing.T) {
			b, err := Build(payload, "application/EDIFACT", "orders.edi", BuildOptions{
				SignCert: sender.Cert, SignKey: sender.Key, SignDigest: "sha256",
				EncryptCerts: []*x509.Certificate{receiver.Cert}, Cipher: enc,
				Compression: SignThenCompress, TransferEncoding: "binary",
			})
			if err != nil {
				t.Fatal(err)
			}
			unwrap := func(e *Entity, o Options) (*Result, *StreamResult, error, error) {
				mem, merr := UnwrapEntity(e, o)
				sres, serr := UnwrapStream(e.Header, Section{R: slowReaderAt{bytes.NewReader(e.Body)}, N: int64(len(e.Body))}, StreamOptions{
					Options: o, NewFile: func() (*os.File, error) { return os.CreateTemp(t.TempDir(), "layer-*") },
				})
				if !slices.Equal(mem.Layers, sres.Layers) || mem.Signed != sres.Signed || mem.Compressed != sres.Compressed {
					t.Fatalf("in memory %+v (%v)\nstream %+v (%v)", mem, merr, sres.Result, serr)
				}
				return mem, sres, merr, serr
			}
			before := pipelinedLayers.Load()
			mem, sres, merr, serr := unwrap(httpEntity(b), opts)
			if merr != nil || serr != nil {
				t.Fatalf("in memory: %v; stream: %v", merr, serr)
			}
			if pipelinedLayers.Load() == before {
				t.Fatal("the signed layer was not verified while it was inflated")
			}
			got, err := io.ReadAll(sres.Body.Reader())
			if err != nil || !bytes.Equal(got, mem.Payload) {
				t.Fatalf("payload: %d bytes streamed, %d in memory (%v)", len(got), len(mem.Payload), err)
			}
			if _, ok := sres.Body.R.(*os.File); !ok {
				t.Fatalf("payload section over %T, not the layer file", sres.Body.R)
			}
			if want := sha256.Sum256(got); !bytes.Equal(sres.BodySHA256(), want[:]) {
				t.Fatal("payload SHA-256 missing or wrong")
			}
			mmic, _ := mem.MIC("sha-256")
			smic, err := sres.MIC("sha-256")
			if err != nil || mmic != smic {
				t.Fatalf("MIC %q vs %q (%v)", smic, mmic, err)
			}

			_, _, merr, serr = unwrap(httpEntity(b), Options{Keys: opts.Keys, Trusted: []*x509.Certificate{other.Cert}})
			if merr == nil || serr == nil || errors.Is(merr, cms.ErrUnknownSigner) != errors.Is(serr, cms.ErrUnknownSigner) {
				t.Fatalf("untrusted signer: in memory %v; stream %v", merr, serr)
			}
			trunc := httpEntity(b)
			trunc.Body = trunc.Body[:len(trunc.Body)*3/4]
			if _, _, merr, serr = unwrap(trunc, opts); merr == nil || serr == nil {
				t.Fatalf("cut body: in memory %v; stream %v", merr, serr)
			}
			small := opts
			small.MaxSize = int64(len(payload)) / 2
			_, _, merr, serr = unwrap(httpEntity(b), small)
			if !errors.Is(merr, cms.ErrTooLarge) || !errors.Is(serr, cms.ErrTooLarge) {
				t.Fatalf("over MaxSize: in memory %v; stream %v", merr, serr)
			}
		})
	}
}

// An encrypted message whose next layers are read while it is decrypted
// (compressed then signed, or signed only; CBC and GCM) agrees with the
// in-memory unwrap in everything streamBoth compares: on success; when
// the GCM tag does not verify (the decryption's refusal is the reason,
// whatever the later layers made of the bytes); when the first of two of
// our keys addressed is wrong (the decrypter discards what it wrote and
// the message is read again one layer after the other); and when the
// compression ratio passes the limit only against the decrypted layer's
// real size, known at its end.
func TestUnwrapStreamReadsWhileDecrypting(t *testing.T) {
	sender, receiver, _, opts := streamParties(t)
	// ~4 MB of hex lines: about 2:1 compressible, so that the encrypted
	// layer is large when compressed too.
	rng := rand.New(rand.NewPCG(1, 2))
	var payload []byte
	for len(payload) < 4<<20 {
		line := make([]byte, 38)
		for i := range line {
			line[i] = byte(rng.Uint32())
		}
		payload = append(hex.AppendEncode(payload, line), '\r', '\n')
	}
	slow := func(r io.ReaderAt) io.ReaderAt { return slowReaderAt{r} }
	for _, enc := range []string{"aes256-cbc", "aes128-gcm"} {
		for _, comp := range []Compression{NoCompression, SignThenCompress} {
			t.Run(fmt.Sprintf("%s/comp=%d", enc, comp), func(t *testing.T) {
				b, err := Build(payload, "application/EDIFACT", "orders.edi", BuildOptions{
					SignCert: sender.Cert, SignKey: sender.Key, SignDigest: "sha256",
					EncryptCerts: []*x509.Certificate{receiver.Cert}, Cipher: enc,
					Compression: comp, TransferEncoding: "binary",
				})
				if err != nil {
					t.Fatal(err)
				}
				before, passed := pipelinedDecrypts.Load(), passedLayers.Load()
				mem, sres := streamBothFrom(t, httpEntity(b), opts, slow)
				if comp == SignThenCompress && passedLayers.Load() == passed {
					t.Fatal("the decrypted layer that only the inflater reads was not passed through memory")
				}
				if !bytes.Equal(mem.Payload, payload) {
					t.Fatal("payload differs")
				}
				if pipelinedDecrypts.Load() == before {
					t.Fatal("the next layer was not read while the message was decrypted")
				}
				if _, ok := sres.Body.R.(*os.File); !ok {
					t.Fatalf("payload section over %T, not a layer file", sres.Body.R)
				}

				// A changed byte in the middle of the ciphertext: GCM
				// refuses it at the tag; CBC garbles two blocks that the
				// later layers refuse.
				bad := httpEntity(b)
				bad.Body = slices.Clone(bad.Body)
				bad.Body[len(bad.Body)/2] ^= 0x40
				streamBothFrom(t, bad, opts, slow)
				if enc == "aes128-gcm" && !errors.Is(unwrapErr(t, bad, opts), cms.ErrDecrypt) {
					t.Fatal("a changed GCM ciphertext is not refused as a decryption failure")
				}

				// Our certificate twice, the first with a key whose key
				// transport yields a wrong content key (as RSA PKCS#1 v1.5
				// implicit rejection does): its content fails after it was
				// written, the second is tried.
				two := opts
				two.Keys = []cms.KeyPair{{Cert: receiver.Cert, Key: wrongKeyFor(t, b, receiver)}, receiver}
				retries := sequentialRetries.Load()
				mem, _ = streamBothFrom(t, httpEntity(b), two, slow)
				if !bytes.Equal(mem.Payload, payload) {
					t.Fatal("payload differs with the second key")
				}
				if sequentialRetries.Load() == retries {
					t.Fatal("the discarded attempt was not followed by a sequential read")
				}

				if comp != SignThenCompress {
					return
				}
				// MaxRatio between inflated ÷ the encrypted layer's size
				// and inflated ÷ the compressed layer's real size.
				plain, _, err := cms.Decrypt(httpEntity(b).Body, opts.Keys)
				if err != nil {
					t.Fatal(err)
				}
				der := plain[bytes.Index(plain, []byte("\r\n\r\n"))+4:]
				inflated, err := cms.Decompress(der, 0)
				if err != nil {
					t.Fatal(err)
				}
				ratio := opts
				i, c, e := float64(len(inflated)), float64(len(der)), float64(len(httpEntity(b).Body))
				ratio.MaxRatio = (i/c + i/e) / 2
				streamBothFrom(t, httpEntity(b), ratio, slow)
				if !errors.Is(unwrapErr(t, httpEntity(b), ratio), cms.ErrTooLarge) {
					t.Fatalf("ratio %.4f (%.4f…%.4f) not refused", ratio.MaxRatio, i/e, i/c)
				}
			})
		}
	}
}

// unwrapErr is the in-memory unwrap's error (streamBoth checked that the
// streamed one is of the same class).
func unwrapErr(t *testing.T, e *Entity, opts Options) error {
	t.Helper()
	_, err := UnwrapEntity(e, opts)
	return err
}

// wrongSessionKey answers every PKCS#1 v1.5 key transport with the same
// wrong content key of the length asked for, every byte b.
type wrongSessionKey struct {
	*rsa.PrivateKey
	b byte
}

func (k wrongSessionKey) Decrypt(_ io.Reader, _ []byte, opts crypto.DecrypterOpts) ([]byte, error) {
	//lint:ignore SA1019 the test imitates the implicit rejection of the PKCS#1 v1.5 key transport AS2 partners use (cms.unwrapKey)
	o, ok := opts.(*rsa.PKCS1v15DecryptOptions)
	if !ok {
		return nil, errors.New("not PKCS#1 v1.5")
	}
	return bytes.Repeat([]byte{k.b}, o.SessionKeyLen), nil
}

// wrongKeyFor is a wrongSessionKey whose content key the decryption of
// message b refuses. A wrong CBC key decrypts to garbage whose padding is
// valid about once in 256 messages; only the key configured for the
// certificate would know better, and keys are checked against their
// certificates when loaded, so a wrong key addressed by our certificate is
// this test's making: it picks one that fails, so that the test always
// exercises the refusal after the content was written (it failed about
// once in 128 runs with a fixed key).
func wrongKeyFor(t *testing.T, b *Built, receiver cms.KeyPair) wrongSessionKey {
	t.Helper()
	e := httpEntity(b)
	der, err := cmsBody(e)
	if err != nil {
		t.Fatal(err)
	}
	for v := 0x42; v < 0x142; v++ {
		k := wrongSessionKey{receiver.Key.(*rsa.PrivateKey), byte(v)}
		if _, _, err := cms.Decrypt(der, []cms.KeyPair{{Cert: receiver.Cert, Key: k}}); err != nil {
			return k
		}
	}
	t.Fatal("every wrong content key decrypted the message")
	return wrongSessionKey{}
}

// A passed-through layer whose reader asks for more than the write-behind
// queue holds at once gets its bytes (the writer does not wait for room
// then); one kept by default (nobody decided) holds what was written, in
// its file; a reader going back in a passed layer gets errLayerDropped.
func TestGrowingLayerModes(t *testing.T) {
	data := make([]byte, 5<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	newFile := func() *os.File {
		f, err := os.CreateTemp(t.TempDir(), "layer-*")
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	write := func(g *growingLayer) {
		go func() {
			for p := data; len(p) > 0; p = p[min(len(p), 10000):] {
				if _, err := g.Write(p[:min(len(p), 10000)]); err != nil {
					g.finish(err)
					return
				}
			}
			g.finish(nil)
		}()
	}

	g := newPassableLayer(newFile())
	if !g.passThrough() {
		t.Fatal("an undecided layer was not passed through")
	}
	write(g)
	big := make([]byte, 2<<20) // twice the queue
	for off := 0; off < len(data); off += len(big) {
		n, err := g.ReadAt(big, int64(off))
		if !bytes.Equal(big[:n], data[off:off+n]) || err != nil && !(errors.Is(err, io.EOF) && off+n == len(data)) {
			t.Fatalf("passed layer at %d: %d bytes, %v", off, n, err)
		}
	}
	if _, err := g.ReadAt(big[:10], 0); !errors.Is(err, errLayerDropped) || !g.wasDropped() {
		t.Fatalf("reading back a passed layer: %v", err)
	}
	if size, err := g.wait(); size != int64(len(data)) || err != nil {
		t.Fatalf("passed layer: size %d, %v", size, err)
	}
	if st, _ := g.f.Stat(); st.Size() != 0 {
		t.Fatalf("a passed layer wrote %d bytes to its file", st.Size())
	}

	g = newPassableLayer(newFile())
	write(g)
	if size, err := g.wait(); size != int64(len(data)) || err != nil {
		t.Fatalf("undecided layer: size %d, %v", size, err)
	}
	got, err := os.ReadFile(g.f.Name())
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("undecided layer's file: %d bytes (%v)", len(got), err)
	}
	if n, err := g.ReadAt(big[:10], 0); n != 10 || err != nil || !bytes.Equal(big[:10], data[:10]) {
		t.Fatalf("kept layer read back: %d, %v", n, err)
	}
}

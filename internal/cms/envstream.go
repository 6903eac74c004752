package cms

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/des"
	"crypto/subtle"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"io"

	"github.com/edigateway/gateway/internal/gcmstream"
)

// maxStreamHeader bounds every element DecryptStream reads into memory
// (recipient infos, originator info, algorithm parameters, attributes).
const maxStreamHeader = 1 << 20

// Sink is where DecryptStream writes the plaintext: a file it may rewind
// and truncate (an *os.File), so that a failed attempt leaves nothing.
type Sink interface {
	io.Writer
	Truncate(size int64) error
	Seek(offset int64, whence int) (int64, error)
}

// DecryptStream decrypts an EnvelopedData or AuthEnvelopedData ContentInfo
// (DER or BER: definite or indefinite lengths, the encrypted content
// primitive or chunked into constructed OCTET STRINGs to any depth) read
// from src, size bytes, into dst, holding only the small parts of the
// structure in memory (each at most 1 MiB) and the content in 32 KiB steps.
// CBC content is decrypted incrementally, the last block held back for the
// padding check; GCM content is decrypted into dst while its GHASH is
// computed and the tag is checked at the end. On any error dst is
// truncated to nothing: no unauthenticated plaintext is left behind. It
// reports and fails as Decrypt does. When several of our keys are
// addressed, each is tried in turn, re-reading src.
func DecryptStream(src io.ReaderAt, size int64, keys []KeyPair, dst Sink) (DecryptInfo, error) {
	info, err := decryptStream(src, size, keys, dst)
	if err != nil {
		discard(dst)
		return info, fmt.Errorf("cms: decrypt: %w", err)
	}
	return info, nil
}

func discard(dst Sink) {
	_ = dst.Truncate(0)
	_, _ = dst.Seek(0, io.SeekStart)
}

// streamEnvelope is the part of an enveloped structure before its content.
type streamEnvelope struct {
	auth       bool
	recipients []asn1.RawValue
	alg        pkix.AlgorithmIdentifier
	content    sHeader    // the [0] encryptedContent header
	stack      [4]sHeader // ContentInfo, [0] EXPLICIT, the SEQUENCE, encryptedContentInfo
}

// readEnvelopeHead reads up to the header of the encrypted content.
func readEnvelopeHead(s *berStream) (*streamEnvelope, error) {
	ci, err := s.next()
	if err != nil {
		return nil, err
	}
	if !ci.is(0, 16, true) {
		return nil, fmt.Errorf("%w: ContentInfo is not a SEQUENCE", ErrMalformed)
	}
	oidH, err := s.next()
	if err != nil {
		return nil, err
	}
	var oid asn1.ObjectIdentifier
	if err := streamUnmarshal(s, oidH, &oid); err != nil {
		return nil, fmt.Errorf("ContentInfo contentType: %w", err)
	}
	env := &streamEnvelope{}
	switch {
	case oid.Equal(oidEnvelopedData):
	case oid.Equal(oidAuthEnvelopedData):
		env.auth = true
	default:
		return nil, fmt.Errorf("content type %s is not enveloped: %w", contentTypeName(oid), ErrMalformed)
	}
	explicit, err := s.next()
	if err != nil {
		return nil, err
	}
	if !explicit.is(2, 0, true) {
		return nil, fmt.Errorf("%w: ContentInfo content is not [0] EXPLICIT", ErrMalformed)
	}
	seq, err := s.next()
	if err != nil {
		return nil, err
	}
	if !seq.is(0, 16, true) {
		return nil, fmt.Errorf("%w: enveloped content is not a SEQUENCE", ErrMalformed)
	}
	ver, err := s.next()
	if err != nil {
		return nil, err
	}
	var version int
	if err := streamUnmarshal(s, ver, &version); err != nil {
		return nil, fmt.Errorf("version: %w", err)
	}
	h, err := s.next()
	if err != nil {
		return nil, err
	}
	if h.is(2, 0, true) { // originatorInfo
		if err := s.skip(h); err != nil {
			return nil, err
		}
		if h, err = s.next(); err != nil {
			return nil, err
		}
	}
	if !h.is(0, 17, true) {
		return nil, fmt.Errorf("%w: recipientInfos is not a SET", ErrMalformed)
	}
	der, err := s.readDER(h, maxStreamHeader)
	if err != nil {
		return nil, err
	}
	if _, err := asn1.UnmarshalWithParams(der, &env.recipients, "set"); err != nil {
		return nil, fmt.Errorf("%w: recipientInfos: %v", ErrMalformed, err)
	}
	eci, err := s.next()
	if err != nil {
		return nil, err
	}
	if !eci.is(0, 16, true) {
		return nil, fmt.Errorf("%w: encryptedContentInfo is not a SEQUENCE", ErrMalformed)
	}
	env.stack = [4]sHeader{ci, explicit, seq, eci}
	ct, err := s.next()
	if err != nil {
		return nil, err
	}
	var ctype asn1.ObjectIdentifier
	if err := streamUnmarshal(s, ct, &ctype); err != nil {
		return nil, fmt.Errorf("encryptedContentInfo contentType: %w", err)
	}
	ah, err := s.next()
	if err != nil {
		return nil, err
	}
	if err := streamUnmarshal(s, ah, &env.alg); err != nil {
		return nil, fmt.Errorf("contentEncryptionAlgorithm: %w", err)
	}
	if more, err := s.more(eci); err != nil {
		return nil, err
	} else if !more {
		return nil, fmt.Errorf("cms: decrypt: detached encrypted content: %w", ErrMalformed)
	}
	if env.content, err = s.next(); err != nil {
		return nil, err
	}
	if env.content.class != 2 || env.content.tag != 0 || env.content.indefinite && !env.content.constructed {
		return nil, fmt.Errorf("%w: encryptedContent is not [0]", ErrMalformed)
	}
	return env, nil
}

func streamUnmarshal(s *berStream, h sHeader, v any) error {
	der, err := s.readDER(h, maxStreamHeader)
	if err != nil {
		return err
	}
	return unmarshalAll(der, v)
}

func decryptStream(src io.ReaderAt, size int64, keys []KeyPair, dst Sink) (DecryptInfo, error) {
	var info DecryptInfo
	s := newBERStream(io.NewSectionReader(src, 0, size))
	env, err := readEnvelopeHead(s)
	if err != nil {
		return info, malformed(err)
	}
	info.AuthEnveloped = env.auth
	cc, ok := cipherByOID(env.alg.Algorithm)
	if !ok {
		return info, fmt.Errorf("content cipher %s: %w", env.alg.Algorithm, ErrUnsupportedAlgorithm)
	}
	if env.auth && !cc.aead {
		return info, fmt.Errorf("AuthEnvelopedData with non-AEAD cipher %s: %w", cc.name, ErrUnsupportedAlgorithm)
	}
	info.Cipher = cc.name

	type candidate struct {
		kp   KeyPair
		ktri keyTransRecipientInfo
	}
	var cands []candidate
	for _, kp := range keys {
		if kp.Cert == nil || kp.Key == nil {
			continue
		}
		for _, ri := range env.recipients {
			if ri.Class != asn1.ClassUniversal || ri.Tag != asn1.TagSequence {
				continue
			}
			var ktri keyTransRecipientInfo
			if err := unmarshalAll(ri.FullBytes, &ktri); err != nil {
				continue
			}
			if identifierMatches(ktri.RID, kp.Cert) {
				cands = append(cands, candidate{kp, ktri})
			}
		}
	}
	if len(cands) == 0 {
		return info, fmt.Errorf("%d recipient infos, %d keys: %w", len(env.recipients), len(keys), ErrNoRecipient)
	}
	var lastErr error
	for i, c := range cands {
		kt, oaepHash, cek, err := unwrapKey(c.kp.Key, c.ktri, cc.keyLen)
		if err != nil {
			lastErr = err
			if errors.Is(err, ErrUnsupportedAlgorithm) || errors.Is(err, ErrMalformed) {
				return info, err
			}
			continue
		}
		if i > 0 { // another attempt: read the structure again
			discard(dst)
			s = newBERStream(io.NewSectionReader(src, 0, size))
			if env, err = readEnvelopeHead(s); err != nil {
				return info, malformed(err)
			}
		}
		err = streamContent(s, env, cc, cek, dst)
		if err != nil {
			lastErr = err
			if errors.Is(err, ErrUnsupportedAlgorithm) || errors.Is(err, ErrMalformed) || !errors.Is(err, ErrDecrypt) {
				return info, err
			}
			continue
		}
		info.KeyTransport, info.OAEPHash, info.Recipient = kt, oaepHash, c.kp.Cert
		return info, nil
	}
	return info, lastErr
}

// malformed makes BER errors ErrMalformed.
func malformed(err error) error {
	if errors.Is(err, errBER) && !errors.Is(err, ErrMalformed) {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return err
}

// streamContent decrypts the content env.content names (s is positioned
// just past its header), reads the rest of the structure and checks it.
func streamContent(s *berStream, env *streamEnvelope, cc contentCipher, key []byte, dst Sink) error {
	if len(key) != cc.keyLen {
		return fmt.Errorf("%w: content key of %d bytes for %s", ErrDecrypt, len(key), cc.name)
	}
	var block cipher.Block
	var err error
	if cc.tripDES {
		block, err = des.NewTripleDESCipher(key)
	} else {
		block, err = aes.NewCipher(key)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrDecrypt, err)
	}
	if !cc.aead {
		var iv []byte
		if err := unmarshalAll(env.alg.Parameters.FullBytes, &iv); err != nil {
			return fmt.Errorf("%s IV: %w", cc.name, err)
		}
		if len(iv) != block.BlockSize() {
			return fmt.Errorf("%w: %s IV of %d bytes", ErrMalformed, cc.name, len(iv))
		}
		w := &cbcWriter{dec: cipher.NewCBCDecrypter(block, iv), bs: block.BlockSize(), dst: dst}
		if err := s.octets(env.content, w); err != nil {
			return malformed(err)
		}
		if err := w.finish(); err != nil {
			return err
		}
		return malformed(finishEnvelope(s, env, nil))
	}
	var p gcmParameters
	if err := unmarshalAll(env.alg.Parameters.FullBytes, &p); err != nil {
		return fmt.Errorf("GCM parameters: %w", err)
	}
	if _, err := newGCM(block, len(p.Nonce), p.ICVLen); err != nil {
		return err // the same nonce and tag sizes as Decrypt accepts
	}
	d, err := newGCMStream(block, p.Nonce)
	if err != nil {
		return err
	}
	w := &gcmWriter{d: d, dst: dst}
	if !env.auth {
		// GCM in EnvelopedData: the tag is the content's last ICVLen bytes.
		w.hold = p.ICVLen
	}
	if err := s.octets(env.content, w); err != nil {
		return malformed(err)
	}
	if w.err != nil {
		return w.err
	}
	var aad, mac []byte
	if env.auth {
		if err := finishEnvelope(s, env, func(a, m []byte) { aad, mac = a, m }); err != nil {
			return malformed(err)
		}
		if len(mac) != p.ICVLen {
			return fmt.Errorf("%w: GCM tag of %d bytes, parameters say %d", ErrMalformed, len(mac), p.ICVLen)
		}
	} else {
		if len(w.held) < p.ICVLen {
			return fmt.Errorf("%w: GCM content shorter than its tag", ErrDecrypt)
		}
		mac = w.held
		if err := finishEnvelope(s, env, nil); err != nil {
			return malformed(err)
		}
	}
	return verifyGCM(d, aad, mac)
}

// finishEnvelope reads what follows the encrypted content: the end of
// encryptedContentInfo, then unprotectedAttrs (EnvelopedData) or authAttrs,
// mac and unauthAttrs (AuthEnvelopedData; auth gets the AAD and the mac),
// the ends of the enveloped SEQUENCE and of the ContentInfo, and padding.
func finishEnvelope(s *berStream, env *streamEnvelope, auth func(aad, mac []byte)) error {
	ci, explicit, seq, eci := env.stack[0], env.stack[1], env.stack[2], env.stack[3]
	if err := closeElement(s, eci, "encryptedContentInfo"); err != nil {
		return err
	}
	var aad, mac []byte
	for {
		more, err := s.more(seq)
		if err != nil {
			return err
		}
		if !more {
			break
		}
		h, err := s.next()
		if err != nil {
			return err
		}
		switch {
		case env.auth && h.is(2, 1, true) && mac == nil && aad == nil: // authAttrs
			raw, err := s.readDER(h, maxStreamHeader)
			if err != nil {
				return err
			}
			// RFC 5083 §2.1: the AAD is the DER of authAttrs with a SET tag.
			aad = append([]byte{0x31}, raw[1:]...)
		case env.auth && h.class == 0 && h.tag == 4 && mac == nil:
			b := bytesWriter{max: 64}
			if err := s.octets(h, &b); err != nil {
				return err
			}
			mac = append([]byte{}, b.b...)
		case env.auth && h.is(2, 2, true) && mac != nil, // unauthAttrs
			!env.auth && h.is(2, 1, true): // unprotectedAttrs
			if err := s.skip(h); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: unexpected element (class %d, tag %d) after the encrypted content", ErrMalformed, h.class, h.tag)
		}
	}
	if err := closeElement(s, explicit, "ContentInfo content"); err != nil {
		return err
	}
	if err := closeElement(s, ci, "ContentInfo"); err != nil {
		return err
	}
	if env.auth {
		if mac == nil {
			return fmt.Errorf("%w: AuthEnvelopedData without a mac", ErrMalformed)
		}
		auth(aad, mac)
	}
	return s.rest()
}

// closeElement checks that the constructed element h ends here.
func closeElement(s *berStream, h sHeader, name string) error {
	more, err := s.more(h)
	if err != nil {
		return err
	}
	if more {
		return fmt.Errorf("%w: %s has more elements than expected", ErrMalformed, name)
	}
	return nil
}

type bytesWriter struct {
	b   []byte
	max int
}

func (w *bytesWriter) Write(p []byte) (int, error) {
	if len(w.b)+len(p) > w.max {
		return 0, fmt.Errorf("%w: element too long", ErrMalformed)
	}
	w.b = append(w.b, p...)
	return len(p), nil
}

// cbcWriter decrypts CBC ciphertext as it is written, holding back the
// last block until finish checks its padding.
type cbcWriter struct {
	dec     cipher.BlockMode
	bs      int
	dst     io.Writer
	pending []byte // ciphertext not yet a whole block, or the held-back last block
	out     []byte
	total   int64
}

func (w *cbcWriter) Write(p []byte) (int, error) {
	n := len(p)
	w.total += int64(n)
	w.pending = append(w.pending, p...)
	// Decrypt all whole blocks but the last (it may be the padded one).
	k := (len(w.pending) - 1) / w.bs * w.bs
	if k > 0 {
		if cap(w.out) < k {
			w.out = make([]byte, k)
		}
		out := w.out[:k]
		w.dec.CryptBlocks(out, w.pending[:k])
		if _, err := w.dst.Write(out); err != nil {
			return 0, fmt.Errorf("decrypted content: %w", err)
		}
		w.pending = append(w.pending[:0], w.pending[k:]...)
	}
	return n, nil
}

func (w *cbcWriter) finish() error {
	if w.total == 0 || w.total%int64(w.bs) != 0 || len(w.pending) != w.bs {
		return fmt.Errorf("%w: ciphertext of %d bytes is not a multiple of the %d-byte block", ErrDecrypt, w.total, w.bs)
	}
	last := make([]byte, w.bs)
	w.dec.CryptBlocks(last, w.pending)
	n := int(last[w.bs-1])
	if n == 0 || n > w.bs {
		return fmt.Errorf("%w: bad padding", ErrDecrypt)
	}
	for _, b := range last[w.bs-n:] {
		if subtle.ConstantTimeByteEq(b, byte(n)) != 1 {
			return fmt.Errorf("%w: bad padding", ErrDecrypt)
		}
	}
	if _, err := w.dst.Write(last[:w.bs-n]); err != nil {
		return fmt.Errorf("decrypted content: %w", err)
	}
	return nil
}

// newGCMStream is gcmstream.New with this package's errors.
func newGCMStream(block cipher.Block, nonce []byte) (*gcmstream.Stream, error) {
	d, err := gcmstream.New(block, nonce)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return d, nil
}

// verifyGCM checks the tag of d: ErrDecrypt when it does not match.
func verifyGCM(d *gcmstream.Stream, aad, tag []byte) error {
	switch err := d.Verify(aad, tag); {
	case err == nil:
		return nil
	case errors.Is(err, gcmstream.ErrAuth):
		return fmt.Errorf("%w: %v", ErrDecrypt, err)
	default:
		return fmt.Errorf("%w: %v", ErrUnsupportedAlgorithm, err)
	}
}

// gcmWriter decrypts GCM ciphertext as it is written; with hold > 0 the
// last hold bytes are kept back (the tag at the end of the content).
type gcmWriter struct {
	d    *gcmstream.Stream
	dst  io.Writer
	hold int
	held []byte
	err  error
}

func (w *gcmWriter) Write(p []byte) (int, error) {
	n := len(p)
	if w.hold > 0 {
		w.held = append(w.held, p...)
		if len(w.held) <= w.hold {
			return n, nil
		}
		p = w.held[:len(w.held)-w.hold]
		defer func() { w.held = append(w.held[:0], w.held[len(w.held)-w.hold:]...) }()
	}
	if _, err := w.dst.Write(w.d.Decrypt(p)); err != nil {
		w.err = fmt.Errorf("decrypted content: %w", err)
		return 0, w.err
	}
	return n, nil
}

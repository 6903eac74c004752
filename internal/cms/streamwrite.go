package cms

import (
	"compress/zlib"
	"crypto/aes"
	"crypto/cipher"
	"crypto/des"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"io"

	"github.com/edigateway/gateway/internal/gcmstream"
)

// The streaming writers produce BER with indefinite lengths and the
// content in constructed OCTET STRINGs of 64 KiB segments, as streaming
// senders (BouncyCastle, OpenSSL -stream) do, so that content of any size
// is written in fixed memory.

const segmentSize = 64 << 10

// segmenter writes what it is given as OCTET STRING segments of at most
// segmentSize bytes.
type segmenter struct {
	w   io.Writer
	buf []byte
}

func (s *segmenter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), segmentSize-len(s.buf))
		s.buf = append(s.buf, p[:k]...)
		p = p[k:]
		if len(s.buf) == segmentSize {
			if err := s.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (s *segmenter) flush() error {
	if len(s.buf) == 0 {
		return nil
	}
	_, err := s.w.Write(appendElement(nil, []byte{0x04}, s.buf))
	s.buf = s.buf[:0]
	return err
}

var eoc2 = []byte{0, 0}

func mustMarshal(v any) []byte {
	b, err := asn1.Marshal(v)
	if err != nil {
		panic(err) // fixed values of this package
	}
	return b
}

// encryptWriter is EncryptStream's writer.
type encryptWriter struct {
	w       io.Writer
	seg     *segmenter
	cbc     cipher.BlockMode
	bs      int
	pending []byte
	gcm     *gcmstream.Stream
	out     []byte
	closed  bool
}

// EncryptStream returns a writer that encrypts what is written to it for
// every recipient (as Encrypt does: CBC ciphers give EnvelopedData, GCM
// AuthEnvelopedData) and writes the BER ContentInfo to w as it goes; Close
// writes the rest (the last block, the GCM tag). Memory is fixed whatever
// the content's size.
func EncryptStream(w io.Writer, recipients []*x509.Certificate, cipherName string, oaep bool) (io.WriteCloser, error) {
	cc, err := cipherByName(cipherName)
	if err != nil {
		return nil, fmt.Errorf("cms: encrypt: %w", err)
	}
	if len(recipients) == 0 {
		return nil, errors.New("cms: encrypt: no recipients")
	}
	key := make([]byte, cc.keyLen)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("cms: encrypt: %w", err)
	}
	if cc.tripDES {
		setDESParity(key)
	}
	var ris []byte
	for _, cert := range recipients {
		ri, err := keyTransRecipient(cert, key, oaep)
		if err != nil {
			return nil, fmt.Errorf("cms: encrypt: recipient %q: %w", cert.Subject.String(), err)
		}
		ris = append(ris, ri.FullBytes...)
	}
	var block cipher.Block
	if cc.tripDES {
		block, err = des.NewTripleDESCipher(key)
	} else {
		block, err = aes.NewCipher(key)
	}
	if err != nil {
		return nil, fmt.Errorf("cms: encrypt: %w", err)
	}
	ew := &encryptWriter{w: w, seg: &segmenter{w: w}, bs: block.BlockSize(), out: make([]byte, 32<<10)}
	alg := pkix.AlgorithmIdentifier{Algorithm: cc.oid}
	outer := oidEnvelopedData
	if cc.aead {
		outer = oidAuthEnvelopedData
		nonce := make([]byte, 12)
		if _, err := rand.Read(nonce); err != nil {
			return nil, fmt.Errorf("cms: encrypt: %w", err)
		}
		alg.Parameters = asn1.RawValue{FullBytes: mustMarshal(gcmParameters{Nonce: nonce, ICVLen: 16})}
		if ew.gcm, err = newGCMStream(block, nonce); err != nil {
			return nil, fmt.Errorf("cms: encrypt: %w", err)
		}
	} else {
		iv := make([]byte, block.BlockSize())
		if _, err := rand.Read(iv); err != nil {
			return nil, fmt.Errorf("cms: encrypt: %w", err)
		}
		alg.Parameters = asn1.RawValue{FullBytes: mustMarshal(iv)}
		ew.cbc = cipher.NewCBCEncrypter(block, iv)
	}
	var head []byte
	head = append(head, 0x30, 0x80)
	head = append(head, mustMarshal(outer)...)
	head = append(head, 0xa0, 0x80, 0x30, 0x80, 0x02, 0x01, 0x00)
	head = appendElement(head, []byte{0x31}, ris)
	head = append(head, 0x30, 0x80)
	head = append(head, mustMarshal(oidData)...)
	head = append(head, mustMarshal(alg)...)
	head = append(head, 0xa0, 0x80)
	if _, err := w.Write(head); err != nil {
		return nil, fmt.Errorf("cms: encrypt: %w", err)
	}
	return ew, nil
}

func (e *encryptWriter) Write(p []byte) (int, error) {
	if e.closed {
		return 0, errors.New("cms: encrypt: write after close")
	}
	n := len(p)
	if e.gcm != nil {
		for len(p) > 0 {
			k := min(len(p), len(e.out))
			ct := e.out[:k]
			e.gcm.Encrypt(ct, p[:k])
			if _, err := e.seg.Write(ct); err != nil {
				return 0, err
			}
			p = p[k:]
		}
		return n, nil
	}
	e.pending = append(e.pending, p...)
	if k := len(e.pending) / e.bs * e.bs; k > 0 {
		if cap(e.out) < k {
			e.out = make([]byte, k)
		}
		ct := e.out[:k]
		e.cbc.CryptBlocks(ct, e.pending[:k])
		if _, err := e.seg.Write(ct); err != nil {
			return 0, err
		}
		e.pending = append(e.pending[:0], e.pending[k:]...)
	}
	return n, nil
}

// Close writes the last block (CBC padding) or the tag (GCM) and ends the
// structure.
func (e *encryptWriter) Close() error {
	if e.closed {
		return nil
	}
	e.closed = true
	if e.cbc != nil {
		pad := e.bs - len(e.pending)
		for range pad {
			e.pending = append(e.pending, byte(pad))
		}
		e.cbc.CryptBlocks(e.pending, e.pending)
		if _, err := e.seg.Write(e.pending); err != nil {
			return err
		}
	}
	if err := e.seg.flush(); err != nil {
		return err
	}
	tail := append([]byte{}, eoc2...) // [0] encryptedContent
	tail = append(tail, eoc2...)      // EncryptedContentInfo
	if e.gcm != nil {
		tag := e.gcm.Tag(nil)
		tail = append(tail, mustMarshal(tag[:])...)
	}
	tail = append(tail, 0, 0, 0, 0, 0, 0) // the SEQUENCE, [0], ContentInfo
	_, err := e.w.Write(tail)
	return err
}

// compressWriter is CompressStream's writer.
type compressWriter struct {
	w   io.Writer
	seg *segmenter
	z   *zlib.Writer
}

// CompressStream returns a writer that compresses what is written to it
// (zlib) into a BER CompressedData ContentInfo written to w as it goes;
// Close ends it.
func CompressStream(w io.Writer) (io.WriteCloser, error) {
	return CompressStreamLevel(w, zlib.DefaultCompression)
}

// CompressStreamLevel is CompressStream at a zlib compression level.
func CompressStreamLevel(w io.Writer, level int) (io.WriteCloser, error) {
	var head []byte
	head = append(head, 0x30, 0x80)
	head = append(head, mustMarshal(oidCompressedData)...)
	head = append(head, 0xa0, 0x80, 0x30, 0x80, 0x02, 0x01, 0x00)
	head = append(head, mustMarshal(pkix.AlgorithmIdentifier{Algorithm: oidZlibCompress})...)
	head = append(head, 0x30, 0x80)
	head = append(head, mustMarshal(oidData)...)
	head = append(head, 0xa0, 0x80, 0x24, 0x80)
	if _, err := w.Write(head); err != nil {
		return nil, fmt.Errorf("cms: compress: %w", err)
	}
	seg := &segmenter{w: w}
	z, err := zlib.NewWriterLevel(seg, level)
	if err != nil {
		return nil, fmt.Errorf("cms: compress: %w", err)
	}
	return &compressWriter{w: w, seg: seg, z: z}, nil
}

func (c *compressWriter) Write(p []byte) (int, error) { return c.z.Write(p) }

func (c *compressWriter) Close() error {
	if err := c.z.Close(); err != nil {
		return err
	}
	if err := c.seg.flush(); err != nil {
		return err
	}
	// OCTET STRING, [0], EncapsulatedContentInfo, CompressedData, [0], ContentInfo.
	_, err := c.w.Write(make([]byte, 12))
	return err
}

package cms

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/edigateway/gateway/internal/limits"
)

// VerifyDetachedStream is VerifyDetached over content read from a stream:
// the signature (small) is parsed first, then the content is read once
// and hashed with every digest its signer infos name, and the signature is
// checked at the end. It returns the signer and the number of content
// bytes read.
func VerifyDetachedStream(sig []byte, content io.Reader, trusted []*x509.Certificate, now time.Time) (*Signer, int64, error) {
	return VerifyDetachedStreamCheck(sig, content, trusted, now, nil)
}

// VerifyDetachedStreamCheck is VerifyDetachedStream with the CA trust of
// VerifyDetachedCheck: with check set, a certificate embedded in the
// signature may be the signer, accepted only if check accepts it after
// the signature verified.
func VerifyDetachedStreamCheck(sig []byte, content io.Reader, trusted []*x509.Certificate, now time.Time, check SignerCheck) (*Signer, int64, error) {
	sd, err := parseSignedData(sig)
	if err != nil {
		return nil, 0, fmt.Errorf("cms: verify: %w", err)
	}
	hashes := map[crypto.Hash]hash.Hash{}
	var ws []io.Writer
	for _, raw := range sd.SignerInfos {
		var si signerInfo
		if err := unmarshalAll(raw.FullBytes, &si); err != nil {
			return nil, 0, fmt.Errorf("cms: verify: SignerInfo: %w", err)
		}
		if d, ok := digestByOID(si.DigestAlgorithm.Algorithm); ok && hashes[d.hash] == nil {
			hashes[d.hash] = d.hash.New()
			ws = append(ws, hashes[d.hash])
		}
	}
	var inner []byte
	var innerSum hash.Hash
	if len(sd.EncapContentInfo.EContent.FullBytes) != 0 {
		// Accept an attached signature only when its content is the same.
		if inner, err = eContent(sd); err != nil {
			return nil, 0, fmt.Errorf("cms: verify: %w", err)
		}
		innerSum = sha256.New()
		ws = append(ws, innerSum)
	}
	n, err := io.Copy(io.MultiWriter(append(ws, io.Discard)...), content)
	if err != nil {
		return nil, n, fmt.Errorf("cms: verify: reading the content: %w", err)
	}
	if innerSum != nil {
		want := sha256.Sum256(inner)
		if int64(len(inner)) != n || !bytes.Equal(innerSum.Sum(nil), want[:]) {
			return nil, n, fmt.Errorf("cms: verify: signature carries different content: %w", ErrBadSignature)
		}
	}
	s, err := sd.verifyChecked(func(h crypto.Hash) []byte {
		if d := hashes[h]; d != nil {
			return d.Sum(nil)
		}
		return nil
	}, trusted, now, check)
	return s, n, err
}

// verifyChecked verifies sd against the content digests digestOf gives,
// with check as in VerifyDetachedCheck.
func (sd *signedData) verifyChecked(digestOf func(crypto.Hash) []byte, trusted []*x509.Certificate, now time.Time, check SignerCheck) (*Signer, error) {
	candidates := trusted
	var embedded []*x509.Certificate
	if check != nil {
		embedded, _ = sd.certificates()
		candidates = append(append([]*x509.Certificate{}, trusted...), embedded...)
	}
	s, err := sd.verifyDigests(digestOf, candidates, now)
	if err != nil {
		return nil, fmt.Errorf("cms: verify: %w", checkInvalid(err, check, embedded))
	}
	if check != nil {
		if err := check(s.Cert, embedded); err != nil {
			return nil, fmt.Errorf("cms: verify: %w", err)
		}
	}
	return s, nil
}

// ErrDigestsMissing: VerifyDetachedDigestsCheck was not given a digest the
// signature needs (or the signature carries its content); verify by
// reading the content instead.
var ErrDigestsMissing = errors.New("cms: verify: the content digests given are not those the signature needs")

// VerifyDetachedDigestsCheck is VerifyDetachedStreamCheck for content
// already hashed (while it was read for another purpose): digests holds
// its digest under one or more hash functions. It fails with
// ErrDigestsMissing, before any check, when a signer info names a digest
// not given or the signature carries content of its own.
func VerifyDetachedDigestsCheck(sig []byte, digests map[crypto.Hash][]byte, trusted []*x509.Certificate, now time.Time, check SignerCheck) (*Signer, error) {
	sd, err := parseSignedData(sig)
	if err != nil {
		return nil, fmt.Errorf("cms: verify: %w", err)
	}
	if len(sd.EncapContentInfo.EContent.FullBytes) != 0 {
		return nil, ErrDigestsMissing
	}
	for _, raw := range sd.SignerInfos {
		var si signerInfo
		if err := unmarshalAll(raw.FullBytes, &si); err != nil {
			return nil, fmt.Errorf("cms: verify: SignerInfo: %w", err)
		}
		if d, ok := digestByOID(si.DigestAlgorithm.Algorithm); ok && digests[d.hash] == nil {
			return nil, ErrDigestsMissing
		}
	}
	return sd.verifyChecked(func(h crypto.Hash) []byte { return digests[h] }, trusted, now, check)
}

// DecompressStream inflates a CompressedData ContentInfo (DER or BER, the
// compressed content primitive or chunked) read from src, size bytes, into
// dst as it streams, under lim: past lim.MaxBytes, or past lim.MaxRatio
// times the compressed size once over the ratio floor, it stops with an
// error wrapping ErrTooLarge; check sees the running output size after
// every chunk (limits across nested layers). It returns the number of
// bytes written. Nothing but fixed-size buffers is held in memory.
func DecompressStream(src io.ReaderAt, size int64, dst io.Writer, lim limits.Inflation, check func(total int64) error) (int64, error) {
	n, err := decompressStream(src, size, dst, lim, check)
	switch {
	case err == nil:
		return n, nil
	case errors.Is(err, limits.ErrTooLarge) || errors.Is(err, limits.ErrRatio):
		return n, fmt.Errorf("cms: decompress: %w: %w", ErrTooLarge, err)
	case errors.Is(err, errBER) && !errors.Is(err, ErrMalformed):
		return n, fmt.Errorf("cms: decompress: %w: %w", ErrMalformed, err)
	case errors.Is(err, ErrMalformed) || errors.Is(err, ErrUnsupportedAlgorithm):
		return n, fmt.Errorf("cms: decompress: %w", err)
	}
	return n, fmt.Errorf("cms: decompress: %w", err)
}

func decompressStream(src io.ReaderAt, size int64, dst io.Writer, lim limits.Inflation, check func(total int64) error) (int64, error) {
	s := newBERStream(io.NewSectionReader(src, 0, size))
	expect := func(class, tag int, what string) (sHeader, error) {
		h, err := s.next()
		if err != nil {
			return h, err
		}
		if !h.is(class, tag, true) {
			return h, fmt.Errorf("%w: %s expected", ErrMalformed, what)
		}
		return h, nil
	}
	ci, err := expect(0, 16, "ContentInfo SEQUENCE")
	if err != nil {
		return 0, err
	}
	h, err := s.next()
	if err != nil {
		return 0, err
	}
	var oid asn1.ObjectIdentifier
	if err := streamUnmarshal(s, h, &oid); err != nil {
		return 0, fmt.Errorf("ContentInfo contentType: %w", err)
	}
	if !oid.Equal(oidCompressedData) {
		return 0, fmt.Errorf("content type %s is not compressed-data: %w", contentTypeName(oid), ErrMalformed)
	}
	explicit, err := expect(2, 0, "ContentInfo [0]")
	if err != nil {
		return 0, err
	}
	cd, err := expect(0, 16, "CompressedData SEQUENCE")
	if err != nil {
		return 0, err
	}
	if h, err = s.next(); err != nil {
		return 0, err
	}
	var version int
	if err := streamUnmarshal(s, h, &version); err != nil {
		return 0, fmt.Errorf("CompressedData version: %w", err)
	}
	if h, err = s.next(); err != nil {
		return 0, err
	}
	var alg struct {
		Algorithm  asn1.ObjectIdentifier
		Parameters asn1.RawValue `asn1:"optional"`
	}
	if err := streamUnmarshal(s, h, &alg); err != nil {
		return 0, fmt.Errorf("compressionAlgorithm: %w", err)
	}
	if !alg.Algorithm.Equal(oidZlibCompress) {
		return 0, fmt.Errorf("algorithm %s: %w", alg.Algorithm, ErrUnsupportedAlgorithm)
	}
	eci, err := expect(0, 16, "EncapsulatedContentInfo SEQUENCE")
	if err != nil {
		return 0, err
	}
	if h, err = s.next(); err != nil {
		return 0, err
	}
	var ctype asn1.ObjectIdentifier
	if err := streamUnmarshal(s, h, &ctype); err != nil {
		return 0, fmt.Errorf("eContentType: %w", err)
	}
	if more, err := s.more(eci); err != nil || !more {
		if err == nil {
			err = fmt.Errorf("%w: no content", ErrMalformed)
		}
		return 0, err
	}
	ec, err := expect(2, 0, "eContent [0] EXPLICIT")
	if err != nil {
		return 0, err
	}
	oh, err := s.next()
	if err != nil {
		return 0, err
	}
	if oh.class != 0 || oh.tag != 4 {
		return 0, fmt.Errorf("%w: eContent is not an OCTET STRING", ErrMalformed)
	}

	// The zlib reader pulls the compressed bytes the BER reader streams
	// out of the OCTET STRING.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		// The segments (a sender's are often 1–4 KiB) reach the pipe 256 KiB
		// at a time: one hand-over between the goroutines per 256 KiB.
		bw := bufio.NewWriterSize(pw, 256<<10)
		err := s.octets(oh, bw)
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
		done <- err
	}()
	// A large buffer between the pipe and zlib (which reads it byte by
	// byte through io.ByteReader): a pipe hand-over per 256 KiB, not per
	// 4 KiB of flate's own buffer.
	n, ierr := inflateTo(bufio.NewReaderSize(pr, 256<<10), size, dst, lim, check)
	if ierr == nil {
		// Bytes after the zlib stream inside the OCTET STRING are ignored,
		// as Decompress ignores them.
		_, ierr = io.Copy(io.Discard, pr)
	}
	pr.CloseWithError(errInflateStopped)
	berr := <-done
	switch {
	case berr != nil && errors.Is(berr, errBER):
		return n, berr // the structure is broken: that is the reason
	case ierr != nil:
		return n, ierr
	case berr != nil:
		return n, berr
	}
	for _, c := range []sHeader{ec, eci, cd, explicit, ci} {
		if err := closeElement(s, c, "CompressedData"); err != nil {
			return n, err
		}
	}
	return n, s.rest()
}

var errInflateStopped = errors.New("inflate stopped")

// inflateTo inflates the zlib stream r into dst in ChunkSize steps under
// lim (compressed: the ratio's denominator) and check.
func inflateTo(r io.Reader, compressed int64, dst io.Writer, lim limits.Inflation, check func(int64) error) (int64, error) {
	zr, err := zlib.NewReader(r)
	if err != nil {
		return 0, fmt.Errorf("zlib: %w: %v", ErrMalformed, err)
	}
	defer zr.Close()
	buf := make([]byte, limits.ChunkSize)
	var total int64
	for {
		k, rerr := zr.Read(buf)
		if k > 0 {
			total += int64(k)
			if lim.MaxBytes > 0 && total > lim.MaxBytes {
				return total, fmt.Errorf("more than %d bytes: %w", lim.MaxBytes, limits.ErrTooLarge)
			}
			if err := lim.CheckRatio(total, compressed); err != nil {
				return total, err
			}
			if check != nil {
				if err := check(total); err != nil {
					return total, err
				}
			}
			if _, err := dst.Write(buf[:k]); err != nil {
				return total, fmt.Errorf("decompressed content: %w", err)
			}
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, fmt.Errorf("zlib: %w: %v", ErrMalformed, rerr)
		}
	}
}

// ContentTypeStream reports the CMS content type of the ContentInfo at the
// start of r (as ContentType does), reading only its first elements.
func ContentTypeStream(r io.Reader) (string, error) {
	s := newBERStream(r)
	h, err := s.next()
	if err != nil || !h.is(0, 16, true) {
		return "", fmt.Errorf("cms: content type: %w: not a ContentInfo", ErrMalformed)
	}
	if h, err = s.next(); err != nil {
		return "", fmt.Errorf("cms: content type: %w", malformed(err))
	}
	var oid asn1.ObjectIdentifier
	if err := streamUnmarshal(s, h, &oid); err != nil {
		return "", fmt.Errorf("cms: content type: %w", malformed(err))
	}
	return contentTypeName(oid), nil
}

package smime

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"mime"
	"strings"

	"github.com/edigateway/gateway/internal/cms"
)

// BuildStream writes the AS2 message of the payload read from r to w, with
// the layers Build applies in the same order, in one pass over the payload
// and in memory that does not depend on its size: compression and
// encryption are streamed (cms.CompressStream, cms.EncryptStream: BER with
// indefinite lengths), the multipart/signed content is hashed as it is
// written and signed at its end (the signature part follows the content),
// and the MIC is that same hash (or, unsigned, the hash of the entity it
// covers taken on the way). The returned Built has no Body: w received it.
//
// The multipart/signed boundary is random (144 bits); should it occur in
// the signed content, BuildStream fails rather than send an ambiguous
// message.
func BuildStream(w io.Writer, r io.Reader, contentType, filename string, opts BuildOptions) (*Built, error) {
	plan, err := planBuild(contentType, filename, opts)
	if err != nil {
		return nil, err
	}
	if plan.signing && (opts.SignCert == nil || opts.SignKey == nil) {
		return nil, errors.New("smime: build: signing needs SignCert and SignKey")
	}
	h, _ := cms.DigestHash(plan.micName)
	mic := h.New()
	b := &streamBuilder{top: true}
	sink := w
	// From the outside in: each layer writes its header (to the HTTP
	// header when it is the outermost) and returns the writer of its body.
	if plan.encrypting {
		sink = b.open(sink, envelopedHeader())
		enc, err := cms.EncryptStream(sink, opts.EncryptCerts, opts.Cipher, opts.OAEP)
		if err != nil {
			return nil, fmt.Errorf("smime: build: %w", err)
		}
		sink = b.push(enc, enc.Close)
	}
	if plan.compressAfter {
		sink = b.push(compressLayer(b.open(sink, compressedHeader())))
	}
	if plan.signing {
		boundary, err := randomBoundary()
		if err != nil {
			return nil, err
		}
		body := b.open(sink, signedHeader(plan.micName, boundary))
		if _, err := io.WriteString(body, "--"+boundary+"\r\n"); err != nil {
			return nil, fmt.Errorf("smime: build: %w", err)
		}
		content := &signedContent{w: body, h: mic, boundary: []byte(boundary)}
		sink = b.push(content, func() error {
			if content.found {
				return errors.New("smime: build: the boundary occurs in the signed content; send again")
			}
			sig, err := cms.Sign(nil, opts.SignCert, opts.SignKey, cms.SignOptions{
				Digest: opts.SignDigest, PSS: opts.SignPSS, Chain: opts.SignChain, ContentDigest: mic.Sum(nil)})
			if err != nil {
				return fmt.Errorf("smime: build: %w", err)
			}
			_, err = body.Write(signaturePart(boundary, sig))
			return err
		})
	}
	if plan.compressBefore {
		sink = b.push(compressLayer(b.open(sink, compressedHeader())))
	}
	switch {
	case plan.signing:
	case plan.encrypting || plan.compressBefore:
		// Unsigned, protected: the MIC covers the payload entity with its
		// header.
		sink = io.MultiWriter(sink, mic)
	default:
		r = io.TeeReader(r, mic) // plain: the content without header
	}
	body := b.open(sink, plan.payloadHeader)
	if plan.base64 {
		enc := &base64LineWriter{w: body}
		if _, err := io.Copy(enc, r); err != nil {
			return nil, fmt.Errorf("smime: build: %w", err)
		}
		if err := enc.Close(); err != nil {
			return nil, fmt.Errorf("smime: build: %w", err)
		}
	} else if _, err := io.Copy(body, r); err != nil {
		return nil, fmt.Errorf("smime: build: %w", err)
	}
	if b.err != nil {
		return nil, fmt.Errorf("smime: build: %w", b.err)
	}
	for i := len(b.closers) - 1; i >= 0; i-- {
		if err := b.closers[i](); err != nil {
			return nil, fmt.Errorf("smime: build: %w", err)
		}
	}
	return &Built{
		Header:      b.header,
		ContentType: b.header.Get("Content-Type"),
		MIC:         base64.StdEncoding.EncodeToString(mic.Sum(nil)),
		MICAlg:      plan.micName,
	}, nil
}

// buildPlan is what Build and BuildStream decide from the options.
type buildPlan struct {
	payloadHeader                 Header
	base64                        bool
	signing, encrypting           bool
	compressBefore, compressAfter bool
	micName                       string
}

func planBuild(contentType, filename string, opts BuildOptions) (*buildPlan, error) {
	if contentType == "" {
		contentType = DefaultContentType
	}
	if _, _, err := mime.ParseMediaType(contentType); err != nil {
		return nil, fmt.Errorf("smime: build: content type %q: %w", contentType, err)
	}
	cte := strings.ToLower(opts.TransferEncoding)
	if cte == "" {
		cte = "binary"
	}
	if cte != "binary" && cte != "base64" {
		return nil, fmt.Errorf("smime: build: transfer encoding %q: use binary or base64", opts.TransferEncoding)
	}
	p := &buildPlan{
		payloadHeader: Header{{"Content-Type", contentType}, {"Content-Transfer-Encoding", cte}},
		base64:        cte == "base64",
		signing:       opts.SignDigest != "",
		encrypting:    opts.Cipher != "",
	}
	if filename != "" {
		p.payloadHeader = append(p.payloadHeader, Field{"Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": filename})})
	}
	p.compressBefore = opts.Compression == CompressThenSign || (opts.Compression != NoCompression && !p.signing)
	p.compressAfter = opts.Compression == SignThenCompress && p.signing
	micAlg := opts.MICAlg
	if p.signing {
		micAlg = opts.SignDigest
	}
	if micAlg == "" {
		micAlg = "sha-256"
	}
	var err error
	if p.micName, err = NormalizeMICAlg(micAlg); err != nil {
		return nil, fmt.Errorf("smime: build: %w", err)
	}
	return p, nil
}

// streamBuilder holds the layers BuildStream opened: the outermost header
// and the closers that end each layer, innermost last.
type streamBuilder struct {
	top     bool
	header  Header
	closers []func() error
	err     error
}

// open starts an entity with header on sink and returns the writer of its
// body: the outermost entity's header becomes the HTTP header.
func (b *streamBuilder) open(sink io.Writer, header Header) io.Writer {
	if b.top {
		b.top, b.header = false, header
		return sink
	}
	if _, err := sink.Write(entity{header: header}.bytes()); err != nil && b.err == nil {
		b.err = err
	}
	return sink
}

func (b *streamBuilder) push(w io.Writer, close func() error) io.Writer {
	b.closers = append(b.closers, close)
	return w
}

func compressLayer(w io.Writer) (io.Writer, func() error) {
	z, err := cms.CompressStream(w)
	if err != nil {
		return errWriter{err}, func() error { return err }
	}
	return z, z.Close
}

type errWriter struct{ err error }

func (e errWriter) Write([]byte) (int, error) { return 0, e.err }

func envelopedHeader() Header {
	return Header{
		{"Content-Type", "application/pkcs7-mime; smime-type=enveloped-data; name=smime.p7m"},
		{"Content-Transfer-Encoding", "binary"},
		{"Content-Disposition", "attachment; filename=smime.p7m"},
	}
}

func compressedHeader() Header {
	return Header{
		{"Content-Type", "application/pkcs7-mime; smime-type=compressed-data; name=smime.p7z"},
		{"Content-Transfer-Encoding", "binary"},
		{"Content-Disposition", "attachment; filename=smime.p7z"},
	}
}

func signedHeader(micalg, boundary string) Header {
	return Header{{"Content-Type", fmt.Sprintf(`multipart/signed; protocol="application/pkcs7-signature"; micalg=%s; boundary="%s"`, micalg, boundary)}}
}

// signaturePart is what follows the signed content in multipart/signed:
// the signature part and the closing boundary.
func signaturePart(boundary string, sig []byte) []byte {
	var b bytes.Buffer
	b.WriteString("\r\n--" + boundary + "\r\n")
	b.WriteString("Content-Type: application/pkcs7-signature; name=smime.p7s\r\n")
	b.WriteString("Content-Transfer-Encoding: base64\r\n")
	b.WriteString("Content-Disposition: attachment; filename=smime.p7s\r\n\r\n")
	b.Write(base64Lines(sig))
	b.WriteString("\r\n--" + boundary + "--\r\n")
	return b.Bytes()
}

func randomBoundary() (string, error) {
	var r [18]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", fmt.Errorf("smime: build: %w", err)
	}
	return "----=_Part_" + hex.EncodeToString(r[:]), nil
}

// signedContent writes the first part of multipart/signed, hashing it (the
// signature's content digest and the MIC) and watching for the boundary.
type signedContent struct {
	w        io.Writer
	h        hash.Hash
	boundary []byte
	tail     []byte // the last len(boundary)-1 bytes, for a match across writes
	found    bool
}

func (s *signedContent) Write(p []byte) (int, error) {
	s.h.Write(p)
	if !s.found {
		if len(s.tail) > 0 {
			joint := append(s.tail, p[:min(len(p), len(s.boundary)-1)]...)
			s.found = bytes.Contains(joint, s.boundary)
		}
		s.found = s.found || bytes.Contains(p, s.boundary)
		keep := len(s.boundary) - 1
		if len(p) >= keep {
			s.tail = append(s.tail[:0], p[len(p)-keep:]...)
		} else {
			s.tail = append(s.tail, p...)
			s.tail = s.tail[max(0, len(s.tail)-keep):]
		}
	}
	return s.w.Write(p)
}

// base64LineWriter encodes base64 in CRLF-terminated lines of 76
// characters, the last line without a line break (as base64Lines).
type base64LineWriter struct {
	w       io.Writer
	pending []byte // fewer than 57 bytes not yet encoded
	started bool   // a line was written: the next begins with CRLF
	buf     []byte
}

const b64LineBytes = 57 // 76 characters

func (e *base64LineWriter) Write(p []byte) (int, error) {
	n := len(p)
	if len(e.pending) > 0 {
		k := min(len(p), b64LineBytes-len(e.pending))
		e.pending = append(e.pending, p[:k]...)
		p = p[k:]
		if len(e.pending) < b64LineBytes {
			return n, nil
		}
		if err := e.lines(e.pending); err != nil {
			return 0, err
		}
		e.pending = e.pending[:0]
	}
	full := len(p) / b64LineBytes * b64LineBytes
	for full > 0 {
		k := min(full, 1024*b64LineBytes)
		if err := e.lines(p[:k]); err != nil {
			return 0, err
		}
		p, full = p[k:], full-k
	}
	e.pending = append(e.pending, p...)
	return n, nil
}

// lines writes p (a multiple of 57 bytes) as lines, each preceded by the
// line break of the line before.
func (e *base64LineWriter) lines(p []byte) error {
	e.buf = e.buf[:0]
	for len(p) > 0 {
		if e.started {
			e.buf = append(e.buf, '\r', '\n')
		}
		e.started = true
		e.buf = base64.StdEncoding.AppendEncode(e.buf, p[:b64LineBytes])
		p = p[b64LineBytes:]
	}
	_, err := e.w.Write(e.buf)
	return err
}

// Close writes what is pending as the last line.
func (e *base64LineWriter) Close() error {
	if len(e.pending) == 0 {
		return nil
	}
	var b []byte
	if e.started {
		b = append(b, '\r', '\n')
	}
	b = base64.StdEncoding.AppendEncode(b, e.pending)
	e.pending = e.pending[:0]
	_, err := e.w.Write(b)
	return err
}

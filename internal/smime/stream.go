package smime

import (
	"bufio"
	"bytes"
	"crypto"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"io"
	"mime/quotedprintable"
	"os"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/edigateway/gateway/internal/base64body"
	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/limits"
)

// ErrNotStreamable is returned by UnwrapStream for a message it cannot
// process as a stream (opaque signed-data, multipart payloads, base64 that
// needs the lenient in-memory decoder, quoted-printable CMS): the caller
// may unwrap it in memory instead when its size allows.
var ErrNotStreamable = errors.New("not streamable")

// Section is a byte range of a file (or any io.ReaderAt).
type Section struct {
	R      io.ReaderAt
	Off, N int64
}

// Reader returns a fresh reader over the section.
func (s Section) Reader() io.Reader { return io.NewSectionReader(s.R, s.Off, s.N) }

func (s Section) sub(off int64) Section { return Section{s.R, s.Off + off, s.N - off} }

func (s Section) readerAt() io.ReaderAt { return io.NewSectionReader(s.R, s.Off, s.N) }

// prefix reads the section's first n bytes (fewer when it is shorter).
func (s Section) prefix(n int64) ([]byte, error) {
	b := make([]byte, min(n, s.N))
	k, err := s.R.ReadAt(b, s.Off)
	if k == len(b) {
		return b, nil
	}
	return nil, fmt.Errorf("smime: read: %w", err)
}

// StreamOptions configure UnwrapStream.
type StreamOptions struct {
	Options
	// NewFile creates a file for a decoded, decrypted or decompressed
	// layer (required); the caller removes the files it made when the
	// exchange ends.
	NewFile func() (*os.File, error)
	// MaxSignatureBytes bounds the signature part of multipart/signed read
	// into memory (default 1 MiB).
	MaxSignatureBytes int64
	// sequential: every layer is written whole before the next is read
	// (the retry after a decryption that discarded what it wrote).
	sequential bool
}

// StreamResult is a message unwrapped by UnwrapStream. Its Result has the
// layers, signer, decryption and payload metadata (Payload, Entity and the
// in-memory MIC input stay empty); Body holds the payload bytes (transfer
// decoding removed) in a file.
type StreamResult struct {
	Result
	Body Section
	// PayloadReached: the unwrap went through every S/MIME layer and
	// reached the payload. An ErrNotStreamable then concerns the payload
	// alone (multipart, lenient base64): Signed, Encrypted and the
	// layers are what an unwrap in memory would find, so that a message
	// the partner's policy refuses need not be unwrapped in memory.
	PayloadReached bool
	mic            micSource
	// bodySum is the SHA-256 of a section taken on a pass that read it
	// anyway (the signed part's body while it was hashed).
	bodySum sectionSum
}

type sectionSum struct {
	sec Section
	sum []byte
}

// BodySHA256 is the SHA-256 of Body when the unwrap took it on the way
// (the payload was the body of the signed part), or nil: the caller hashes
// Body itself then.
func (r *StreamResult) BodySHA256() []byte {
	if r.bodySum.sum != nil && r.bodySum.sec == r.Body {
		return r.bodySum.sum
	}
	return nil
}

// signedPartSums hashes the first part of multipart/signed as
// splitMultipartStream passes it on: whole, under the digest the micalg
// parameter names (SHA-256 when it names none known), and its body, after
// the header block, under SHA-256.
type signedPartSums struct {
	hash   crypto.Hash
	whole  hash.Hash
	body   hash.Hash
	n      int64 // bytes passed
	bodyAt int64 // offset of the body once the empty line is seen, else -1
	line   int64 // bytes of the current header line so far
	cr     bool  // the current header line is just "\r"
}

func newSignedPartSums(micalg string) *signedPartSums {
	h, err := cms.DigestHash(strings.TrimSpace(micalg))
	if err != nil || !h.Available() {
		h = crypto.SHA256
	}
	return &signedPartSums{hash: h, whole: h.New(), body: sha256.New(), bodyAt: -1}
}

func (s *signedPartSums) Write(p []byte) (int, error) {
	s.whole.Write(p)
	if s.bodyAt < 0 {
		for i, c := range p {
			if s.n+int64(i) >= maxHeaderBytes {
				s.bodyAt = -2 // no header block end within bounds: unused
				break
			}
			switch {
			case c == '\n' && (s.line == 0 || s.line == 1 && s.cr):
				s.bodyAt = s.n + int64(i) + 1
			case c == '\n':
				s.line, s.cr = 0, false
				continue
			}
			if s.bodyAt >= 0 {
				s.body.Write(p[i+1:])
				break
			}
			s.line++
			s.cr = s.line == 1 && c == '\r'
		}
	} else {
		s.body.Write(p)
	}
	s.n += int64(len(p))
	return len(p), nil
}

// digests is the signed part's digest for the signature check.
func (s *signedPartSums) digests() map[crypto.Hash][]byte {
	return map[crypto.Hash][]byte{s.hash: s.whole.Sum(nil)}
}

// micSource is the MIC input: a section, optionally read with its header
// block's bare LFs (crlf 1) or all its bare LFs (crlf 2) turned into CRLF.
type micSource struct {
	sec       Section
	crlf      int
	bodyStart int64
}

func (m micSource) reader() io.Reader {
	switch m.crlf {
	case 1:
		head, _ := m.sec.prefix(m.bodyStart)
		return io.MultiReader(bytes.NewReader(toCRLF(head)), m.sec.sub(m.bodyStart).Reader())
	case 2:
		return &crlfReader{r: bufio.NewReaderSize(m.sec.Reader(), 32<<10)}
	}
	return m.sec.Reader()
}

// MIC is the base64 MIC of the message under alg, computed by reading its
// input from the files.
func (r *StreamResult) MIC(alg string) (string, error) {
	h, err := cms.DigestHash(alg)
	if err != nil {
		return "", fmt.Errorf("smime: mic: %w", err)
	}
	if r.Signed && r.Signer != nil && len(r.Signer.Digest) == h.Size() {
		if sh, err := cms.DigestHash(r.Signer.DigestAlg); err == nil && sh == h {
			// The verified signature's digest is over the MIC input (the
			// signed bytes): the pass that verified it gave the MIC.
			return base64.StdEncoding.EncodeToString(r.Signer.Digest), nil
		}
	}
	d := h.New()
	if _, err := io.Copy(d, r.mic.reader()); err != nil {
		return "", fmt.Errorf("smime: mic: %w", err)
	}
	return base64.StdEncoding.EncodeToString(d.Sum(nil)), nil
}

// crlfReader turns every bare LF into CRLF, as toCRLF does.
type crlfReader struct {
	r       *bufio.Reader
	prevCR  bool
	pending bool // an LF to emit after the CR already emitted
}

func (c *crlfReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if c.pending {
			p[n] = '\n'
			n++
			c.pending, c.prevCR = false, false
			continue
		}
		b, err := c.r.ReadByte()
		if err != nil {
			if n > 0 {
				return n, nil
			}
			return 0, err
		}
		if b == '\n' && !c.prevCR {
			p[n] = '\r'
			n++
			c.pending = true
			continue
		}
		p[n] = b
		n++
		c.prevCR = b == '\r'
	}
	return n, nil
}

// streamEntity is an entity whose body lives in a file.
type streamEntity struct {
	Header Header
	Body   Section
	Raw    Section // valid when hasRaw
	hasRaw bool
	start  int64 // offset of Body in Raw
}

func (e *streamEntity) mediaType() (string, map[string]string, error) {
	return (&Entity{Header: e.Header}).MediaType()
}

// parseStreamEntity parses the header block at the start of raw.
func parseStreamEntity(raw Section) (*streamEntity, error) {
	p, err := raw.prefix(maxHeaderBytes + 1)
	if err != nil {
		return nil, err
	}
	h, start, err := parseHeaderBlock(p)
	if err != nil {
		return nil, err
	}
	return &streamEntity{Header: h, Body: raw.sub(int64(start)), Raw: raw, hasRaw: true, start: int64(start)}, nil
}

// UnwrapStream is UnwrapEntity for an entity whose body is in a file (the
// AS2 request body as spooled): the same layers in any order, the same
// checks, caps and results, with every large intermediate (a transfer-
// decoded body, decrypted or decompressed content) in a file made by
// opts.NewFile and only bounded parts in memory. Signatures are verified
// by hashing the signed part while it is read; a failed one is retried
// over the line-ending repairs by reading the part again. It fails with
// ErrNotStreamable for what it cannot stream.
func UnwrapStream(header Header, body Section, opts StreamOptions) (*StreamResult, error) {
	if opts.NewFile == nil {
		return nil, errors.New("smime: UnwrapStream needs NewFile")
	}
	var dec *decryptRun
	res, err := unwrapStream(header, body, opts, &dec)
	if dec == nil {
		return res, err
	}
	// The layers after the decrypted one were read while it was being
	// decrypted: the decryption's outcome decides what they are worth.
	size, derr := dec.g.wait()
	if derr != nil {
		// As one after the other: the decryption's refusal is the reason,
		// whatever the later layers made of unauthenticated bytes.
		return dec.fail(derr)
	}
	if dec.g.wasRewound() || dec.g.wasDropped() {
		// One of several keys failed after writing: what the later layers
		// read was discarded (rare: several of our keys addressed, the
		// first wrong). Or a reader of the layer passed through memory
		// asked for bytes it no longer held (not expected: the inflater
		// reads it once, in order). Read the message again, one layer
		// after the other.
		opts.sequential = true
		sequentialRetries.Add(1)
		return unwrapStream(header, body, opts, &dec)
	}
	res.Decryption = dec.info
	for _, s := range []*Section{&res.Body, &res.mic.sec, &res.bodySum.sec} {
		dec.g.onFile(s)
	}
	if err == nil && dec.compressed {
		// The compression ratio was checked against the encrypted
		// layer's size while the decrypted one grew; now its size is known.
		if rerr := dec.lim.CheckRatio(dec.inflated, size-dec.compressedAt); rerr != nil {
			*res = dec.beforeInflate
			res.Decryption = dec.info
			return res, fmt.Errorf("smime: cms: decompress: %w: %w", cms.ErrTooLarge, rerr)
		}
	}
	return res, err
}

// decryptRun is a decryption that runs while the layers after it are read
// from its growing output (the first encrypted layer of a message larger
// than maxHeaderBytes, unless StreamOptions.sequential).
type decryptRun struct {
	g      *growingLayer
	mt     string // the encrypted entity's media type
	before StreamResult
	info   cms.DecryptInfo // once g is done
	// The compressed layer read from g, when there is one: what the final
	// ratio check needs.
	compressed    bool
	compressedAt  int64 // its DER's offset in g
	inflated      int64
	lim           limits.Inflation
	beforeInflate StreamResult
}

// fail is the result of a failed decryption, as UnwrapStream reports it
// when it decrypts before it reads on.
func (d *decryptRun) fail(err error) (*StreamResult, error) {
	res := d.before
	if errors.Is(err, cms.ErrInvalidBER) {
		res.Layers = res.Layers[:len(res.Layers)-1]
		return &res, fmt.Errorf("smime: %s: %w", d.mt, err)
	}
	res.Decryption = d.info
	return &res, fmt.Errorf("smime: %w", err)
}

// clone copies r with its own Layers.
func (r *StreamResult) clone() StreamResult {
	c := *r
	c.Layers = slices.Clone(r.Layers)
	return c
}

// unwrapStream reads the layers of a message one after the other (each
// step below reads one) until the payload, which it then reads. *dec is
// the decryption still running while the layers after it are read, if
// any; UnwrapStream settles its outcome.
func unwrapStream(header Header, body Section, opts StreamOptions, dec **decryptRun) (*StreamResult, error) {
	*dec = nil
	w := &layerWalk{opts: opts, dec: dec, res: &StreamResult{}, cur: &streamEntity{Header: header, Body: body}}
	w.maxLayers, w.maxSize, w.maxRatio, w.maxCompressed = opts.layerLimits()
	for {
		step, err := w.unwrapLayer()
		if err != nil {
			return w.res, err
		}
		switch step {
		case layerBarePayload:
			return w.res, nil
		case layerPayload:
			return w.readPayload()
		}
	}
}

// layerWalk is the state of unwrapStream as it goes from layer to layer.
type layerWalk struct {
	opts StreamOptions
	dec  **decryptRun
	// The limits, with their defaults.
	maxLayers, maxCompressed int
	maxSize                  int64
	maxRatio                 float64
	// inflated counts the bytes of all compressed layers; compressedBase
	// is the first compressed layer's size, the ratio's base;
	// encryptedSize the size of the layer being decrypted.
	inflated, compressedBase, encryptedSize int64
	compressedLayers                        int
	res                                     *StreamResult
	// cur is the entity being read; innerUnsigned the content of the
	// last encrypted or compressed layer (the unsigned MIC's entity).
	cur           *streamEntity
	innerUnsigned *Section
}

// layerStep says what unwrapLayer found.
type layerStep int

const (
	layerNext        layerStep = iota // cur is the next layer
	layerPayload                      // cur is the payload
	layerBarePayload                  // the last layer held the payload without a MIME header; res is complete
)

// unwrapLayer removes the layer cur: a signature (verified as it is
// read), an encryption or a compression.
func (w *layerWalk) unwrapLayer() (layerStep, error) {
	res, opts := w.res, w.opts
	if len(res.Layers) > w.maxLayers {
		return 0, fmt.Errorf("smime: %w: more than %d S/MIME layers", ErrMalformedMIME, w.maxLayers)
	}
	mt, params, err := w.cur.mediaType()
	if err != nil {
		return 0, fmt.Errorf("smime: %w", err)
	}
	if mt == "multipart/signed" {
		content, err := res.verifySignedStream(w.cur, params, opts)
		if err != nil {
			return 0, fmt.Errorf("smime: %w", err)
		}
		w.cur = content
		return layerNext, nil
	}
	if !isPKCS7Mime(mt, params, &Entity{Header: w.cur.Header}) {
		return layerPayload, nil
	}
	der, err := cmsBodyStream(w.cur, opts)
	if err != nil {
		return 0, fmt.Errorf("smime: %w", err)
	}
	kind, err := cms.ContentTypeStream(der.Reader())
	if err != nil {
		return 0, fmt.Errorf("smime: %s: %w", mt, err)
	}
	f, err := opts.NewFile()
	if err != nil {
		return 0, fmt.Errorf("smime: %w", err)
	}
	var n int64
	var innerR io.ReaderAt = f
	switch kind {
	case cms.TypeEnvelopedData, cms.TypeAuthEnvelopedData:
		if innerR, n, err = w.decryptLayer(mt, der, f); err != nil {
			return 0, err
		}
	case cms.TypeCompressedData:
		var signedInside bool
		if n, signedInside, err = w.inflateLayer(mt, der, f); err != nil {
			return 0, err
		}
		if signedInside {
			return layerNext, nil
		}
	case cms.TypeSignedData:
		return 0, fmt.Errorf("smime: opaque signed-data: %w", ErrNotStreamable)
	default:
		return 0, fmt.Errorf("smime: %s holds CMS %s: %w", mt, kind, cms.ErrUnsupportedAlgorithm)
	}
	return w.enterLayerContent(Section{R: innerR, N: n}), nil
}

// decryptLayer decrypts an encrypted layer into f. The first encrypted
// layer of a message larger than maxHeaderBytes is decrypted while the
// layers after it are read from its growing output (*w.dec, unless
// StreamOptions.sequential); it returns the layer's content and size
// (openSize while it grows).
func (w *layerWalk) decryptLayer(mt string, der Section, f *os.File) (io.ReaderAt, int64, error) {
	res, opts, dec := w.res, w.opts, w.dec
	res.Layers = append(res.Layers, LayerEncrypted)
	var info cms.DecryptInfo
	var n int64
	var err error
	if !opts.sequential && !res.Encrypted && *dec == nil {
		// The decrypter writes the layer file while the next
		// layers are read from it as it grows (two cores); the
		// outcome is settled in UnwrapStream.
		d := &decryptRun{g: newPassableLayer(f), mt: mt, before: res.clone()}
		go func() {
			var err error
			d.info, err = cms.DecryptStream(der.readerAt(), der.N, opts.Keys, d.g)
			d.g.finish(err)
		}()
		d.g.waitFor(maxHeaderBytes + 1)
		if !d.g.complete() {
			*dec = d
			pipelinedDecrypts.Add(1)
			res.Encrypted = true
			w.encryptedSize = der.N
			return d.g, openSize, nil
		}
		// A small layer: decrypted already, go on as one after
		// the other.
		n, err = d.g.wait()
		info = d.info
	} else {
		info, err = cms.DecryptStream(der.readerAt(), der.N, opts.Keys, f)
		if err == nil {
			n, err = f.Seek(0, io.SeekCurrent)
		}
	}
	if errors.Is(err, cms.ErrInvalidBER) {
		// A broken encoding: in memory this is found before the
		// layer is known; report it the same way.
		res.Layers = res.Layers[:len(res.Layers)-1]
		return nil, 0, fmt.Errorf("smime: %s: %w", mt, err)
	}
	if !res.Encrypted {
		res.Decryption = info
	}
	if err != nil {
		return nil, 0, fmt.Errorf("smime: %w", err)
	}
	res.Encrypted = true
	return f, n, nil
}

// inflateLayer decompresses a compressed layer into f, within the size
// and ratio limits of all compressed layers together. When the layer is
// multipart/signed it is verified while it is inflated: signedInside
// reports that w.cur is then the signed content.
func (w *layerWalk) inflateLayer(mt string, der Section, f *os.File) (n int64, signedInside bool, err error) {
	res, opts, dec := w.res, w.opts, w.dec
	res.Layers = append(res.Layers, LayerCompressed)
	if w.compressedLayers++; w.compressedLayers > w.maxCompressed {
		return 0, false, fmt.Errorf("smime: more than %d nested compressed layers: %w", w.maxCompressed, cms.ErrTooLarge)
	}
	lim := limits.Inflation{MaxBytes: w.maxSize, MaxRatio: w.maxRatio}
	if w.compressedBase == 0 {
		w.compressedBase = der.N
		if d := *dec; d != nil && der.R == io.ReaderAt(d.g) {
			// The layer is being decrypted: its size is known at
			// the end; until then the encrypted layer's, a little
			// larger, is the ratio's base. UnwrapStream checks the
			// ratio again against the real size.
			w.compressedBase = w.encryptedSize
			d.compressed, d.compressedAt, d.lim = true, der.Off, lim
		}
	}
	// The inflater writes the layer file while, when the layer
	// is multipart/signed, this goroutine splits and hashes it as
	// it grows (two cores, one pass); the layer is used only once
	// both have ended without error.
	g := newGrowingLayer(f)
	passing := *dec != nil && der.R == io.ReaderAt((*dec).g)
	inflated, compressedBase, maxSize := w.inflated, w.compressedBase, w.maxSize
	go func() {
		if passing {
			// Once the inflater has ended, nobody reads the
			// decrypted layer: the decrypter runs to its end.
			defer (*dec).g.release()
		}
		_, err := cms.DecompressStream(der.readerAt(), der.N, g, lim, func(total int64) error {
			if inflated+total > maxSize {
				return fmt.Errorf("compressed layers inflate beyond %d bytes in total: %w", maxSize, limits.ErrTooLarge)
			}
			if err := lim.CheckRatio(inflated+total, compressedBase); err != nil {
				return fmt.Errorf("compressed layers in total: %w", err)
			}
			return nil
		})
		g.finish(err)
	}()
	before := *res
	content, pipelined, verr := res.signedWhileInflating(g, opts, func() {
		if passing {
			// Only the inflater reads the decrypted layer, from
			// memory: it is never written to disk.
			(*dec).g.passThrough()
		}
	})
	if verr != nil {
		g.stop()
	}
	n, err = g.wait()
	if err != nil && !(verr != nil && errors.Is(err, errLayerAborted)) {
		// The inflater's refusal is the reason, whatever the
		// split made of the cut layer.
		*res = before
		if errors.Is(err, cms.ErrInvalidBER) {
			res.Layers = res.Layers[:len(res.Layers)-1]
			return 0, false, fmt.Errorf("smime: %s: %w", mt, err)
		}
		return 0, false, fmt.Errorf("smime: %w", err)
	}
	w.inflated += n
	if d := *dec; d != nil && d.compressed {
		d.inflated = w.inflated
		if d.inflated == n {
			d.beforeInflate = before
			d.beforeInflate.Layers = slices.Clone(before.Layers)
		}
	}
	res.Compressed = true
	if verr != nil {
		return 0, false, fmt.Errorf("smime: %w", verr)
	}
	if !pipelined {
		return n, false, nil
	}
	for _, s := range []*Section{&content.Body, &content.Raw, &res.mic.sec, &res.bodySum.sec} {
		g.onFile(s)
	}
	inner := Section{R: f, N: n}
	w.innerUnsigned = &inner
	w.cur = content
	return n, true, nil
}

// enterLayerContent goes on to the content of an encrypted or compressed
// layer: the next entity, or the payload itself when it has no MIME
// header (a bare payload, of the default content type).
func (w *layerWalk) enterLayerContent(inner Section) layerStep {
	res, opts := w.res, w.opts
	w.innerUnsigned = &inner
	next, err := parseStreamEntity(inner)
	if err != nil || !hasMIMEHeader(next.Header) {
		res.Bare = true
		res.Body = inner
		res.ContentType = opts.DefaultContentType
		if res.ContentType == "" {
			res.ContentType = DefaultContentType
		}
		res.MediaType, _, _ = parseMediaType(res.ContentType)
		res.setUnsignedMICStream(inner, inner, opts.Options)
		return layerBarePayload
	}
	w.cur = next
	return layerNext
}

// readPayload reads the payload entity cur, the innermost one.
func (w *layerWalk) readPayload() (*StreamResult, error) {
	res, cur, opts := w.res, w.cur, w.opts
	res.PayloadReached = true
	payload, err := decodeBodyStream(cur, opts, false)
	if err != nil {
		return res, fmt.Errorf("smime: payload: %w", err)
	}
	res.Body = payload
	res.ContentType = cur.Header.Get("Content-Type")
	res.MediaType, _, _ = cur.mediaType()
	if strings.HasPrefix(res.MediaType, "multipart/") && res.MediaType != "multipart/signed" {
		return res, fmt.Errorf("smime: %s payload: %w", res.MediaType, ErrNotStreamable)
	}
	if res.ContentType == "" {
		res.ContentType = res.MediaType
	}
	res.Filename = (&Entity{Header: cur.Header}).Filename()
	if w.innerUnsigned != nil {
		res.setUnsignedMICStream(*w.innerUnsigned, payload, opts.Options)
	} else {
		res.setUnsignedMICStream(Section{}, payload, opts.Options)
	}
	return res, nil
}

// signedWhileInflating verifies the layer g is being inflated into while it
// grows, when it is multipart/signed (the usual AS2 layering: signed, then
// compressed). It reports false, without reading further, for any other
// layer or one whose writer ended before its header was seen: the caller
// waits for the whole layer then and goes on the usual way.
func (r *StreamResult) signedWhileInflating(g *growingLayer, opts StreamOptions, onSigned func()) (*streamEntity, bool, error) {
	g.waitFor(maxHeaderBytes + 1)
	if g.complete() {
		return nil, false, nil
	}
	// The layer's size is known only at its end: the section runs to the
	// end of what the writer writes.
	next, err := parseStreamEntity(Section{R: g, N: openSize})
	if err != nil || !hasMIMEHeader(next.Header) {
		return nil, false, nil
	}
	mt, params, err := next.mediaType()
	if err != nil || mt != "multipart/signed" {
		return nil, false, nil
	}
	pipelinedLayers.Add(1)
	onSigned()
	content, err := r.verifySignedStream(next, params, opts)
	return content, true, err
}

// pipelinedLayers counts the layers verified while they were inflated (the
// tests check that the concurrent path ran).
var pipelinedLayers atomic.Int64

// pipelinedDecrypts counts the encrypted layers whose next layers were read
// while they were decrypted, and sequentialRetries the messages read again
// one layer after the other because a decryption discarded what it wrote.
var pipelinedDecrypts, sequentialRetries atomic.Int64

// setUnsignedMICStream is setUnsignedMIC for sections.
func (r *StreamResult) setUnsignedMICStream(innerEntity, content Section, opts Options) {
	if r.Signed {
		return
	}
	if r.Encrypted || r.Compressed && !opts.ContentOnlyCompressedMIC {
		r.mic = micSource{sec: innerEntity}
		return
	}
	r.mic = micSource{sec: content}
}

// cmsBodyStream is cmsBody for a body in a file.
func cmsBodyStream(e *streamEntity, opts StreamOptions) (Section, error) {
	looksDER := func(s Section) bool {
		p, err := s.prefix(2)
		return err == nil && len(p) > 1 && p[0] == 0x30
	}
	cte := strings.ToLower(strings.TrimSpace(e.Header.Get("Content-Transfer-Encoding")))
	switch cte {
	case "", "binary", "7bit", "8bit":
		if looksDER(e.Body) {
			return e.Body, nil
		}
		// A base64 body without a label.
		d, err := decodeBase64ToFile(e.Body, opts)
		if err != nil {
			return Section{}, fmt.Errorf("unlabelled body that is neither DER nor plain base64: %w", ErrNotStreamable)
		}
		if looksDER(d) {
			return d, nil
		}
		return e.Body, nil
	case "base64":
		d, err := decodeBase64ToFile(e.Body, opts)
		if err == nil {
			if looksDER(d) {
				return d, nil
			}
			// base64 twice? the in-memory path handles it.
			return Section{}, fmt.Errorf("base64 body that is not DER: %w", ErrNotStreamable)
		}
		if looksDER(e.Body) {
			return e.Body, nil // a base64 label on a binary body
		}
		return Section{}, fmt.Errorf("base64 body: %w", ErrNotStreamable)
	}
	return Section{}, fmt.Errorf("CMS body with Content-Transfer-Encoding %q: %w", cte, ErrNotStreamable)
}

// decodeBase64ToFile decodes a base64 body (whitespace ignored, padding
// only at the end: base64body refuses text after it) into a new file.
func decodeBase64ToFile(body Section, opts StreamOptions) (Section, error) {
	f, err := opts.NewFile()
	if err != nil {
		return Section{}, err
	}
	dec := base64body.NewDecoder(body.Reader())
	n, err := io.Copy(f, dec)
	if err != nil {
		f.Truncate(0)
		return Section{}, fmt.Errorf("%w: base64 body: %v", ErrMalformedMIME, err)
	}
	return Section{R: f, N: n}, nil
}

// decodeBodyStream is DecodedBody for a body in a file.
func decodeBodyStream(e *streamEntity, opts StreamOptions, _ bool) (Section, error) {
	cte := e.Header.Get("Content-Transfer-Encoding")
	switch strings.ToLower(strings.TrimSpace(cte)) {
	case "", "binary", "7bit", "8bit":
		return e.Body, nil
	case "base64":
		d, err := decodeBase64ToFile(e.Body, opts)
		if err != nil {
			return Section{}, fmt.Errorf("%w", ErrNotStreamable)
		}
		return d, nil
	case "quoted-printable":
		f, err := opts.NewFile()
		if err != nil {
			return Section{}, err
		}
		n, err := io.Copy(f, quotedprintable.NewReader(e.Body.Reader()))
		if err != nil {
			return Section{}, fmt.Errorf("%w: quoted-printable body: %v", ErrMalformedMIME, err)
		}
		return Section{R: f, N: n}, nil
	}
	return Section{}, fmt.Errorf("%w: unsupported Content-Transfer-Encoding %q", ErrMalformedMIME, cte)
}

// verifySignedStream is verifyMultipartSigned for a body in a file.
func (r *StreamResult) verifySignedStream(e *streamEntity, params map[string]string, opts StreamOptions) (*streamEntity, error) {
	r.Layers = append(r.Layers, LayerSigned)
	if p := strings.ToLower(params["protocol"]); p != "" && p != "application/pkcs7-signature" && p != "application/x-pkcs7-signature" {
		return nil, fmt.Errorf("multipart/signed protocol %q: %w", p, cms.ErrUnsupportedAlgorithm)
	}
	b := params["boundary"]
	if b == "" || len(b) > 200 {
		return nil, fmt.Errorf("multipart/signed: %w: multipart without a usable boundary", ErrMalformedMIME)
	}
	// The signed part is hashed while it is split off: under the digest
	// micalg names for the signature, and its body for the payload's
	// SHA-256 (the exchange records it).
	sums := newSignedPartSums(params["micalg"])
	raws, err := splitMultipartStream(e.Body, b, sums)
	if err != nil {
		return nil, fmt.Errorf("multipart/signed: %w", err)
	}
	if len(raws) != 2 {
		return nil, fmt.Errorf("%w: multipart/signed with %d parts", ErrMalformedMIME, len(raws))
	}
	content, err := parseStreamEntity(raws[0])
	if err != nil {
		return nil, fmt.Errorf("multipart/signed: part 1: %w", err)
	}
	maxSig := opts.MaxSignatureBytes
	if maxSig <= 0 {
		maxSig = 1 << 20
	}
	if raws[1].N > maxSig {
		return nil, fmt.Errorf("%w: signature part of %d bytes", ErrMalformedMIME, raws[1].N)
	}
	sigRaw, err := raws[1].prefix(raws[1].N)
	if err != nil {
		return nil, err
	}
	sigPart, err := ParseEntity(sigRaw)
	if err != nil {
		return nil, fmt.Errorf("multipart/signed: part 2: %w", err)
	}
	smt, _, err := sigPart.MediaType()
	if err != nil {
		return nil, fmt.Errorf("signature part: %w", err)
	}
	if smt != "application/pkcs7-signature" && smt != "application/x-pkcs7-signature" {
		return nil, fmt.Errorf("%w: signature part is %s", ErrMalformedMIME, smt)
	}
	sig, err := sigPart.DecodedBody()
	if err != nil {
		return nil, fmt.Errorf("signature part: %w", err)
	}
	cands := []micSource{{sec: raws[0]}}
	// The repairs are worked out (another read of the part) only when the
	// exact bytes fail on their digest.
	repairs := func() error {
		if opts.StrictLineEndings {
			return nil
		}
		head, err := raws[0].prefix(content.start)
		if err != nil {
			return err
		}
		bodyBare, err := bareLFAfter(raws[0], content.start)
		if err != nil {
			return err
		}
		if hasBareLF(head) {
			cands = append(cands, micSource{sec: raws[0], crlf: 1, bodyStart: content.start})
		}
		if bodyBare {
			cands = append(cands, micSource{sec: raws[0], crlf: 2})
		}
		return nil
	}
	now := opts.now()
	var errs []error
	for i := 0; i < len(cands); i++ {
		c := cands[i]
		s, err := cms.VerifyDetachedDigestsCheck(sig, sums.digests(), opts.Trusted, now, opts.CheckSigner)
		if i > 0 || errors.Is(err, cms.ErrDigestsMissing) {
			s, _, err = cms.VerifyDetachedStreamCheck(sig, c.reader(), opts.Trusted, now, opts.CheckSigner)
		}
		if err == nil {
			if !r.Signed {
				r.Signed, r.Signer, r.mic = true, s, c
				r.MICAlgParam = params["micalg"]
				r.LineEndingsRepaired = i > 0
				if sums.bodyAt == content.start {
					r.bodySum = sectionSum{content.Body, sums.body.Sum(nil)}
				}
			}
			return content, nil
		}
		errs = append(errs, err)
		if !errors.Is(err, cms.ErrBadSignature) {
			break
		}
		if i == 0 {
			if err := repairs(); err != nil {
				return nil, err
			}
		}
	}
	return nil, verificationError(errs)
}

// lineBreak is the length of line's line break: 2 for CRLF, 1 for LF, 0
// for none (the last line).
func lineBreak(line []byte) int64 {
	switch {
	case bytes.HasSuffix(line, []byte("\r\n")):
		return 2
	case bytes.HasSuffix(line, []byte("\n")):
		return 1
	}
	return 0
}

// bareLFAfter reports whether the section has an LF not preceded by CR at
// or after off (the byte before off counts as the preceding one).
func bareLFAfter(s Section, off int64) (bool, error) {
	prev := byte(0)
	if off > 0 {
		p := make([]byte, 1)
		if _, err := s.R.ReadAt(p, s.Off+off-1); err != nil {
			return false, fmt.Errorf("smime: read: %w", err)
		}
		prev = p[0]
	}
	br := bufio.NewReaderSize(s.sub(off).Reader(), 32<<10)
	first := off == 0
	for {
		c, err := br.ReadByte()
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("smime: read: %w", err)
		}
		if c == '\n' && (first || prev != '\r') {
			return true, nil
		}
		prev, first = c, false
	}
}

// splitMultipartStream is splitMultipart over a section, reading it line by
// line: the parts are sections of the same file. When first is set, it
// receives the bytes of the first part, exactly, as they are read (the
// line break before a line is passed on only once the line is known not
// to be a delimiter line): hashing the signed part costs no other read.
func splitMultipartStream(body Section, boundary string, first io.Writer) ([]Section, error) {
	delim := []byte("--" + boundary)
	br := bufio.NewReaderSize(body.Reader(), 256<<10)
	var parts []Section
	start := int64(-1)
	var off int64 // offset of the current line
	// prevEnd: bytes of the line break before the current line ("\n" or
	// "\r\n"), to take off the previous part's end.
	prevBreak := int64(0)
	// feed: the first part is being passed to first; pendingBreak is the
	// line break before the current line, passed on with it.
	feed := false
	var pendingBreak []byte
	pass := func(b []byte) {
		if len(pendingBreak) > 0 {
			first.Write(pendingBreak)
			pendingBreak = pendingBreak[:0]
		}
		first.Write(b)
	}
	for {
		line, err := br.ReadSlice('\n')
		// A line longer than the buffer is never taken for a delimiter
		// line (it would need pathological trailing whitespace); only its
		// tail is kept, for its line break.
		long := false
		for err == bufio.ErrBufferFull {
			long = true
			off += int64(len(line))
			if feed {
				pass(line)
			}
			line, err = br.ReadSlice('\n')
		}
		n := int64(len(line))
		if long {
			off += n
		} else if n == 0 && err != nil {
			break
		}
		if !long && bytes.HasPrefix(line, delim) {
			rest := line[len(delim):]
			hasEOL := bytes.HasSuffix(rest, []byte("\n"))
			rest = bytes.TrimSuffix(rest, []byte("\n"))
			closing := bytes.HasPrefix(rest, []byte("--"))
			if closing {
				rest = rest[2:]
			}
			if len(bytes.Trim(rest, " \t\r")) == 0 {
				if feed {
					feed = false // the pending break ends the part: not content
					pendingBreak = nil
					first = nil
				}
				if start >= 0 {
					end := off - prevBreak
					if end < start {
						end = start
					}
					parts = append(parts, Section{body.R, body.Off + start, end - start})
				}
				if closing {
					if len(parts) == 0 {
						return nil, fmt.Errorf("%w: multipart without parts", ErrMalformedMIME)
					}
					return parts, nil
				}
				if !hasEOL {
					break
				}
				start = off + n
				if first != nil && len(parts) == 0 {
					feed = true
					if !long {
						off += n
					}
					prevBreak = lineBreak(line)
					continue
				}
			}
		}
		if !long {
			off += n
		}
		prevBreak = lineBreak(line)
		if feed {
			pass(line[:int64(len(line))-prevBreak])
			pendingBreak = append(pendingBreak, line[int64(len(line))-prevBreak:]...)
		}
		if err != nil {
			break
		}
	}
	return nil, fmt.Errorf("%w: multipart close delimiter --%s-- not found", ErrMalformedMIME, boundary)
}

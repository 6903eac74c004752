package xmlenc

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"io"
	"net/textproto"

	"github.com/edigateway/gateway/internal/bufpool"
	"github.com/edigateway/gateway/internal/gcmstream"
)

// Attachment content is decrypted as a stream: a cipherReader over the
// ciphertext (the part's bytes after transfer decoding) yields plaintext as
// it reads, holding back the GCM tag (or the last CBC block) and failing at
// the end when the tag (or the padding) is wrong. Whoever stores the
// plaintext must discard it then; Decrypt applies nothing of a message
// that did not decrypt whole.

// content reads the attachment's content.
func (a Attachment) content() (io.ReadCloser, error) {
	if a.Open != nil {
		return a.Open()
	}
	return io.NopCloser(bytes.NewReader(a.Body)), nil
}

// cipherChunk is the ciphertext decrypted per read.
const cipherChunk = 64 << 10

// cipherReader decrypts IV ‖ ciphertext (‖ tag) read from src with AES-GCM
// (12-byte IV, 16-byte tag, no AAD) or AES-CBC with ISO 10126 padding.
type cipherReader struct {
	src     io.Reader
	block   cipher.Block
	gcm     bool
	started bool
	g       *gcmstream.Stream
	cbc     cipher.BlockMode
	in      []byte // ciphertext read and not yet decrypted (the held-back tail)
	pt      []byte // CBC plaintext buffer
	out     []byte // plaintext not yet returned
	err     error
}

func newCipherReader(key []byte, dc dataCipher, src io.Reader) (*cipherReader, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fail(ErrDecrypt, "%v", err)
	}
	return &cipherReader{src: src, block: block, gcm: dc.gcm, in: bufpool.Get(cipherChunk + 32)[:0]}, nil
}

// Read implements io.Reader; errors of the cipher are *Error values, read
// errors of src are returned as they are.
func (c *cipherReader) Read(p []byte) (int, error) {
	for len(c.out) == 0 {
		if c.err != nil {
			c.release()
			return 0, c.err
		}
		c.fill()
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	return n, nil
}

func (c *cipherReader) start() error {
	ivLen, short := 12, "AES-GCM ciphertext too short"
	if !c.gcm {
		ivLen, short = c.block.BlockSize(), "AES-CBC ciphertext length invalid"
	}
	iv := make([]byte, ivLen)
	if _, err := io.ReadFull(c.src, iv); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fail(ErrDecrypt, "%s", short)
		}
		return err
	}
	if c.gcm {
		g, err := gcmstream.New(c.block, iv)
		if err != nil {
			return fail(ErrDecrypt, "%v", err)
		}
		c.g = g
		return nil
	}
	c.cbc = cipher.NewCBCDecrypter(c.block, iv)
	c.pt = make([]byte, cipherChunk+32)
	return nil
}

// release gives the buffers back to their pool once the reader has ended
// and everything it decrypted has been read.
func (c *cipherReader) release() {
	if c.in != nil {
		bufpool.Put(c.in)
		c.in = nil
	}
	if c.g != nil {
		c.g.Release()
		c.g = nil
	}
}

// fill reads the next piece of ciphertext and decrypts what need not be
// held back; at the end of src it checks the tag or the padding.
func (c *cipherReader) fill() {
	if !c.started {
		c.started = true
		if err := c.start(); err != nil {
			c.err = err
			return
		}
	}
	k, rerr := c.src.Read(c.in[len(c.in):cap(c.in)])
	c.in = c.in[:len(c.in)+k]
	if rerr != nil && rerr != io.EOF {
		c.err = rerr
		return
	}
	bs := c.block.BlockSize()
	var n int // bytes of c.in decrypted now
	if c.gcm {
		n = max(0, len(c.in)-16)
	} else if len(c.in) > 0 {
		n = (len(c.in) - 1) / bs * bs // keep the last block for the padding
	}
	if n > 0 {
		if c.gcm {
			c.out = c.g.Decrypt(c.in[:n])
		} else {
			c.cbc.CryptBlocks(c.pt[:n], c.in[:n])
			c.out = c.pt[:n]
		}
		// c.out stays valid: the next fill runs once it has been read.
		c.in = append(c.in[:0], c.in[n:]...)
	}
	if rerr != io.EOF {
		return
	}
	if c.gcm {
		if len(c.in) < 16 {
			c.err = fail(ErrDecrypt, "AES-GCM ciphertext too short")
			return
		}
		if err := c.g.Verify(nil, c.in); err != nil {
			c.out = nil
			c.err = fail(ErrDecrypt, "AES-GCM authentication failed")
			return
		}
		c.err = io.EOF
		return
	}
	if len(c.in) != bs {
		c.out = nil
		c.err = fail(ErrDecrypt, "AES-CBC ciphertext length invalid")
		return
	}
	last := make([]byte, bs)
	c.cbc.CryptBlocks(last, c.in)
	pad := int(last[bs-1])
	if pad < 1 || pad > bs {
		c.out = nil
		c.err = fail(ErrDecrypt, "AES-CBC padding invalid")
		return
	}
	c.out = append(c.out, last[:bs-pad]...)
	c.in = c.in[:0]
	c.err = io.EOF
}

// decryptBytes decrypts IV ‖ ciphertext (‖ tag) held in memory.
func decryptBytes(key []byte, dc dataCipher, data []byte) ([]byte, error) {
	r, err := newCipherReader(key, dc, bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

// readInnerHeader reads the MIME header block that starts the plaintext of
// an Attachment-Complete encryption (at most maxInnerHeader bytes) and
// returns it with a reader of the content after it.
func readInnerHeader(r io.Reader) (textproto.MIMEHeader, io.Reader, error) {
	br := bufio.NewReaderSize(r, maxInnerHeader)
	head, err := br.Peek(maxInnerHeader)
	if err != nil && err != io.EOF && !errors.Is(err, bufio.ErrBufferFull) {
		return nil, nil, err
	}
	h, skip, err := splitMIMEHead(head)
	if err != nil {
		return nil, nil, err
	}
	if _, err := br.Discard(skip); err != nil {
		return nil, nil, err
	}
	return h, br, nil
}

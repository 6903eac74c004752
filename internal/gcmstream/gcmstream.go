// Package gcmstream is AES-GCM (NIST SP 800-38D) over a stream, for
// content too large to hold: CMS AuthEnvelopedData (package cms) and XML
// Encryption attachments (package xmlenc) decrypt and encrypt with it.
package gcmstream

import (
	"crypto/cipher"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/edigateway/gateway/internal/bufpool"
)

// Errors of Stream; callers wrap them in their own.
var (
	// ErrAuth: the tag does not match (the plaintext must be discarded).
	ErrAuth = errors.New("GCM authentication: message authentication failed")
	// ErrParams: a block cipher, nonce or tag length GCM cannot use.
	ErrParams = errors.New("GCM parameters")
)

// Streaming AES-GCM decryption (NIST SP 800-38D) for content too large to
// hold: the plaintext is produced as the ciphertext arrives and the tag is
// checked at the end; the caller must discard what was produced when the
// check fails. Go's cipher.AEAD is one-shot, so GCM is assembled here from
// its parts, each computed by the standard library where it is fast:
//
//   - the keystream is CTR mode from inc32(J0) (cipher.NewCTR, restarted
//     where the low 32 bits of the counter wrap, which GCM's inc32 does
//     and CTR's 128-bit increment does not);
//   - GHASH of each 64 KiB chunk of ciphertext comes from cipher.AEAD Seal
//     with the chunk as additional data and no plaintext (hardware GHASH
//     where the platform has it): tag = E(K, J0') ⊕ (S·H ⊕ L·H), so
//     S·H = tag ⊕ E(K, J0') ⊕ L·H, with J0' of an all-zero nonce;
//   - the chunks are joined by GHASH's linearity, U(AB) = U(A)·H^m(B) ⊕
//     U(B) with U = S·H, using a constant-time bitwise GF(2^128) multiply
//     a few times per chunk (not per block).
//
// The additional data (RFC 5083 authAttrs) comes after the content in a
// CMS stream; its GHASH is joined at the end the same way.

// gfElem is an element of GF(2^128) in GCM's bit order: hi holds the
// first 8 bytes big-endian.
type gfElem struct{ hi, lo uint64 }

func gfLoad(b []byte) gfElem {
	return gfElem{binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:])}
}

func (x gfElem) bytes() [16]byte {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:], x.hi)
	binary.BigEndian.PutUint64(b[8:], x.lo)
	return b
}

func (x gfElem) xor(y gfElem) gfElem { return gfElem{x.hi ^ y.hi, x.lo ^ y.lo} }

// gfMul multiplies in GCM's field (SP 800-38D Algorithm 1) in constant
// time: no branches or indices depend on the operands.
func gfMul(x, y gfElem) gfElem {
	var z gfElem
	v := y
	for i := 0; i < 128; i++ {
		var bit uint64
		if i < 64 {
			bit = x.hi >> (63 - i) & 1
		} else {
			bit = x.lo >> (127 - i) & 1
		}
		m := -bit
		z.hi ^= v.hi & m
		z.lo ^= v.lo & m
		r := -(v.lo & 1)
		v.lo = v.lo>>1 | v.hi<<63
		v.hi = v.hi>>1 ^ 0xe100000000000000&r
	}
	return z
}

// gfPow returns h^n (n >= 0).
func gfPow(h gfElem, n uint64) gfElem {
	r := gfElem{hi: 1 << 63} // the field's 1
	for b := h; n > 0; n >>= 1 {
		if n&1 == 1 {
			r = gfMul(r, b)
		}
		b = gfMul(b, b)
	}
	return r
}

const Chunk = 64 << 10 // bytes of ciphertext per GHASH call

// ghashStream computes U = GHASH-state·H of a byte stream (zero-padded to
// whole blocks at the end) in chunks.
type ghashStream struct {
	aead   cipher.AEAD
	ej0z   [16]byte // E(K, J0') for the zero nonce
	h      gfElem
	hChunk gfElem // H^(Chunk/16)
	u      gfElem
	buf    []byte
	n      uint64 // bytes hashed
	nonce  [12]byte
}

func newGHASHStream(block cipher.Block) (*ghashStream, error) {
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrParams, err)
	}
	g := &ghashStream{aead: aead, buf: bufpool.Get(Chunk)[:0]}
	var zero, hb [16]byte
	block.Encrypt(hb[:], zero[:])
	g.h = gfLoad(hb[:])
	j0 := zero
	j0[15] = 1
	block.Encrypt(g.ej0z[:], j0[:])
	g.hChunk = gfPow(g.h, Chunk/16)
	return g, nil
}

func (g *ghashStream) write(p []byte) {
	for len(p) > 0 {
		k := copy(g.buf[len(g.buf):cap(g.buf)], p)
		g.buf = g.buf[:len(g.buf)+k]
		p = p[k:]
		if len(g.buf) == cap(g.buf) {
			g.flush()
		}
	}
}

// flush folds the buffered bytes (a whole chunk, or the last, partial one)
// into u.
func (g *ghashStream) flush() {
	if len(g.buf) == 0 {
		return
	}
	var tag [16]byte
	g.aead.Seal(tag[:0], g.nonce[:], nil, g.buf)
	t := gfLoad(tag[:]).xor(gfLoad(g.ej0z[:]))
	l := gfMul(gfElem{hi: uint64(len(g.buf)) * 8}, g.h)
	uc := t.xor(l) // S(chunk)·H
	blocks := uint64(len(g.buf)+15) / 16
	hm := g.hChunk
	if blocks != Chunk/16 {
		hm = gfPow(g.h, blocks)
	}
	g.u = gfMul(g.u, hm).xor(uc)
	g.n += uint64(len(g.buf))
	g.buf = g.buf[:0]
}

// sum returns U of everything written and the number of bytes.
func (g *ghashStream) sum() (gfElem, uint64) {
	g.flush()
	return g.u, g.n
}

// Stream decrypts (or encrypts) GCM content as it is written: Decrypt
// and Encrypt feed it in pieces of any size, Tag and Verify end it.
type Stream struct {
	block   cipher.Block
	g       *ghashStream
	j0      [16]byte
	ctr     cipher.Stream
	ctrLeft uint64 // keystream bytes before the low 32 counter bits wrap
	ctrNext [16]byte
	out     []byte
	n       uint64
}

func New(block cipher.Block, nonce []byte) (*Stream, error) {
	if block.BlockSize() != 16 || len(nonce) == 0 {
		return nil, fmt.Errorf("%w: GCM needs a 128-bit block cipher and a nonce", ErrParams)
	}
	g, err := newGHASHStream(block)
	if err != nil {
		return nil, err
	}
	d := &Stream{block: block, g: g, out: bufpool.Get(Chunk)}
	if len(nonce) == 12 {
		copy(d.j0[:], nonce)
		d.j0[15] = 1
	} else {
		// J0 = GHASH(IV || 0^s || [len(IV)]_64).
		ng, err := newGHASHStream(block)
		if err != nil {
			return nil, err
		}
		ng.write(nonce)
		u, _ := ng.sum()
		j := u.xor(gfMul(gfElem{lo: uint64(len(nonce)) * 8}, g.h))
		d.j0 = j.bytes()
	}
	d.ctrNext = d.j0
	d.restartCTR(true)
	return d, nil
}

// restartCTR starts CTR at inc32 of ctrNext (first: inc32(J0)).
func (d *Stream) restartCTR(first bool) {
	c := d.ctrNext
	low := binary.BigEndian.Uint32(c[12:])
	if first {
		low++
	}
	binary.BigEndian.PutUint32(c[12:], low)
	d.ctr = cipher.NewCTR(d.block, c[:])
	// Blocks until the low 32 bits wrap: 2^32 - low.
	d.ctrLeft = (uint64(1)<<32 - uint64(low)) * 16
	binary.BigEndian.PutUint32(d.ctrNext[12:], 0)
	copy(d.ctrNext[:12], c[:12])
}

// xorKeyStream XORs the next len(p) keystream bytes into dst.
func (d *Stream) xorKeyStream(dst, p []byte) {
	done := 0
	for done < len(p) {
		k := uint64(len(p) - done)
		if k > d.ctrLeft {
			k = d.ctrLeft
		}
		d.ctr.XORKeyStream(dst[done:done+int(k)], p[done:done+int(k)])
		done += int(k)
		d.ctrLeft -= k
		if d.ctrLeft == 0 {
			d.restartCTR(false)
		}
	}
}

// Release gives the Stream's buffers back to their pool once it has ended
// (Tag or Verify) and nothing holds what Decrypt returned; the Stream is
// not used afterwards. Without it they are garbage collected.
func (d *Stream) Release() {
	if cap(d.out) == Chunk {
		bufpool.Put(d.out)
	}
	if d.g != nil && cap(d.g.buf) == Chunk {
		bufpool.Put(d.g.buf)
	}
	d.out, d.g = nil, nil
}

// Decrypt turns ciphertext p into plaintext in an internal buffer (valid
// until the next call) and returns it.
func (d *Stream) Decrypt(p []byte) []byte {
	if cap(d.out) < len(p) {
		d.out = make([]byte, len(p))
	}
	out := d.out[:len(p)]
	d.g.write(p)
	d.n += uint64(len(p))
	d.xorKeyStream(out, p)
	return out
}

// Encrypt turns plaintext p into ciphertext in dst (len(dst) >= len(p)).
func (d *Stream) Encrypt(dst, p []byte) {
	dst = dst[:len(p)]
	d.xorKeyStream(dst, p)
	d.g.write(dst)
	d.n += uint64(len(p))
}

// Verify checks tag over the ciphertext written and aad; ErrAuth when it
// does not match.
func (d *Stream) Verify(aad, tag []byte) error {
	if len(tag) < 12 || len(tag) > 16 {
		return fmt.Errorf("GCM tag length %d: %w", len(tag), ErrParams)
	}
	want, err := d.tagErr(aad)
	if err != nil {
		return err
	}
	if subtle.ConstantTimeCompare(want[:len(tag)], tag) != 1 {
		return ErrAuth
	}
	return nil
}

// Tag is the full GCM tag over the ciphertext written and aad.
func (d *Stream) Tag(aad []byte) [16]byte {
	t, _ := d.tagErr(aad)
	return t
}

func (d *Stream) tagErr(aad []byte) ([16]byte, error) {
	uc, cn := d.g.sum()
	var ua gfElem
	if len(aad) > 0 {
		ag, err := newGHASHStream(d.block)
		if err != nil {
			return [16]byte{}, err
		}
		ag.write(aad)
		ua, _ = ag.sum()
	}
	cBlocks := (cn + 15) / 16
	l := gfElem{hi: uint64(len(aad)) * 8, lo: cn * 8}
	s := gfMul(ua, gfPow(d.g.h, cBlocks)).xor(uc).xor(gfMul(l, d.g.h))
	var ej0 [16]byte
	d.block.Encrypt(ej0[:], d.j0[:])
	return s.xor(gfLoad(ej0[:])).bytes(), nil
}

package brainpool

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"

	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
)

func mustHex(s string) *big.Int {
	b, ok := new(big.Int).SetString(s, 16)
	if !ok {
		panic("brainpool: bad constant")
	}
	return b
}

// NamedCurveURI names brainpoolP256r1 in dsig11:ECKeyValue/dsig11:NamedCurve.
const NamedCurveURI = "urn:oid:1.3.36.3.3.2.8.1.1.7"

// PublicKey is a brainpoolP256r1 public key (a valid curve point, not the identity).
type PublicKey struct {
	p   point
	raw []byte // 0x04 ‖ X ‖ Y
}

// PrivateKey is a brainpoolP256r1 private key. It implements crypto.Signer
// (ECDSA, ASN.1 DER signatures, like crypto/ecdsa) and ECDH.
type PrivateKey struct {
	d   [32]byte
	pub *PublicKey
}

// NewPublicKey parses an uncompressed SEC 1 point (0x04 ‖ X ‖ Y) and checks it is on the curve.
func NewPublicKey(b []byte) (*PublicKey, error) {
	p, err := decodePoint(b)
	if err != nil {
		return nil, err
	}
	return &PublicKey{p: p, raw: bytes.Clone(b)}, nil
}

// Bytes returns the uncompressed SEC 1 encoding.
func (k *PublicKey) Bytes() []byte { return bytes.Clone(k.raw) }

// Equal reports whether x is the same brainpoolP256r1 public key.
func (k *PublicKey) Equal(x crypto.PublicKey) bool {
	o, ok := x.(*PublicKey)
	return ok && bytes.Equal(k.raw, o.raw)
}

// NewPrivateKey makes a key from its 32-byte big-endian scalar, 1 ≤ d < n.
func NewPrivateKey(d []byte) (*PrivateKey, error) {
	if len(d) != 32 {
		return nil, errors.New("brainpool: private key must be 32 bytes")
	}
	var k PrivateKey
	copy(k.d[:], d)
	dl := fromBytes(&k.d)
	if fn.lessThan(&dl)&(1^isZero(&dl)) != 1 {
		return nil, errors.New("brainpool: private key out of range")
	}
	q := scalarMult(&gen, &k.d)
	x, y, _ := q.affine()
	raw := encodePoint(x, y)
	k.pub = &PublicKey{p: point{fp.toMont(ptr(fromBytes(&x))), fp.toMont(ptr(fromBytes(&y))), fp.one}, raw: raw}
	return &k, nil
}

// GenerateKey makes a new key with randomness from r.
func GenerateKey(r io.Reader) (*PrivateKey, error) {
	var b [32]byte
	for i := 0; i < 100; i++ {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return nil, fmt.Errorf("brainpool: random: %w", err)
		}
		if k, err := NewPrivateKey(b[:]); err == nil {
			return k, nil
		}
	}
	return nil, errors.New("brainpool: random source keeps giving out-of-range values")
}

// Public returns the *PublicKey.
func (k *PrivateKey) Public() crypto.PublicKey { return k.pub }

// PublicKey returns the public key.
func (k *PrivateKey) PublicKey() *PublicKey { return k.pub }

// Bytes returns the 32-byte scalar.
func (k *PrivateKey) Bytes() []byte { return bytes.Clone(k.d[:]) }

// Equal reports whether x is the same private key.
func (k *PrivateKey) Equal(x crypto.PrivateKey) bool {
	o, ok := x.(*PrivateKey)
	return ok && subtle.ConstantTimeCompare(k.d[:], o.d[:]) == 1
}

// ECDH returns the X coordinate of d·Q (32 bytes), as RFC 5903 / SP 800-56A
// ECC CDH define the shared secret Z.
func (k *PrivateKey) ECDH(remote *PublicKey) ([]byte, error) {
	if remote == nil {
		return nil, errors.New("brainpool: ECDH with a nil key")
	}
	s := scalarMult(&remote.p, &k.d)
	x, _, inf := s.affine()
	if inf == 1 {
		return nil, errors.New("brainpool: ECDH result is the point at infinity")
	}
	return x[:], nil
}

// hashToScalar is bits2int(digest) mod n (SEC 1 §4.1.3 step 5; n has 256 bits).
func hashToScalar(digest []byte) limbs {
	var b [32]byte
	if len(digest) >= 32 {
		copy(b[:], digest[:32])
	} else {
		copy(b[32-len(digest):], digest)
	}
	e := fromBytes(&b)
	return fn.reduceOnce(&e, 0)
}

// SignRaw returns an ECDSA signature as r ‖ s (32 bytes each), as XML-DSig
// writes it. The nonce is hedged: derived from the key, the digest and 32
// bytes from rand, so neither a bad random source nor a fault alone repeats it.
func (k *PrivateKey) SignRaw(rand io.Reader, digest []byte) ([]byte, error) {
	var entropy [32]byte
	if _, err := io.ReadFull(rand, entropy[:]); err != nil {
		return nil, fmt.Errorf("brainpool: random: %w", err)
	}
	h := sha512.New()
	h.Write(k.d[:])
	h.Write(entropy[:])
	h.Write(digest)
	seed := h.Sum(nil)
	e := hashToScalar(digest)
	dl := fromBytes(&k.d)
	dm := fn.toMont(&dl)
	em := fn.toMont(&e)
	for ctr := uint32(0); ctr < 1000; ctr++ {
		kh := sha256.New()
		kh.Write(seed)
		binary.Write(kh, binary.BigEndian, ctr)
		var kb [32]byte
		kh.Sum(kb[:0])
		kl := fromBytes(&kb)
		if fn.lessThan(&kl)&(1^isZero(&kl)) != 1 {
			continue // rejection sampling: reveals only a discarded candidate
		}
		R := scalarMult(&gen, &kb)
		x, _, _ := R.affine()
		rl := fromBytes(&x)
		rl = fn.reduceOnce(&rl, 0) // x < p < 2n
		if isZero(&rl) == 1 {
			continue
		}
		km := fn.toMont(&kl)
		kinv := fn.invert(&km)
		rm := fn.toMont(&rl)
		t := fn.mul(&rm, &dm)
		t = fn.add(&t, &em)
		sm := fn.mul(&kinv, &t)
		sl := fn.fromMont(&sm)
		if isZero(&sl) == 1 {
			continue
		}
		rb, sb := toBytes(&rl), toBytes(&sl)
		return append(rb[:], sb[:]...), nil
	}
	return nil, errors.New("brainpool: no usable nonce")
}

// Sign implements crypto.Signer: an ECDSA signature over digest in ASN.1 DER
// (SEQUENCE { r INTEGER, s INTEGER }), like crypto/ecdsa.
func (k *PrivateKey) Sign(rand io.Reader, digest []byte, _ crypto.SignerOpts) ([]byte, error) {
	raw, err := k.SignRaw(rand, digest)
	if err != nil {
		return nil, err
	}
	return RawToASN1(raw)
}

// VerifyRaw checks an r ‖ s signature (64 bytes) over digest.
func VerifyRaw(pub *PublicKey, digest, sig []byte) bool {
	if pub == nil || len(sig) != 64 {
		return false
	}
	var rb, sb [32]byte
	copy(rb[:], sig[:32])
	copy(sb[:], sig[32:])
	r, s := fromBytes(&rb), fromBytes(&sb)
	if fn.lessThan(&r) != 1 || isZero(&r) == 1 || fn.lessThan(&s) != 1 || isZero(&s) == 1 {
		return false
	}
	e := hashToScalar(digest)
	sm := fn.toMont(&s)
	w := fn.invert(&sm)
	em, rm := fn.toMont(&e), fn.toMont(&r)
	u1m, u2m := fn.mul(&em, &w), fn.mul(&rm, &w)
	u1, u2 := fn.fromMont(&u1m), fn.fromMont(&u2m)
	u1b, u2b := toBytes(&u1), toBytes(&u2)
	p1 := scalarMult(&gen, &u1b)
	p2 := scalarMult(&pub.p, &u2b)
	R := add(&p1, &p2)
	x, _, inf := R.affine()
	if inf == 1 {
		return false
	}
	xl := fromBytes(&x)
	xl = fn.reduceOnce(&xl, 0)
	return equal(&xl, &r) == 1
}

// VerifyASN1 checks an ASN.1 DER ECDSA signature over digest.
func VerifyASN1(pub *PublicKey, digest, sig []byte) bool {
	raw, err := ASN1ToRaw(sig)
	if err != nil {
		return false
	}
	return VerifyRaw(pub, digest, raw)
}

// RawToASN1 converts r ‖ s (64 bytes) to DER.
func RawToASN1(raw []byte) ([]byte, error) {
	if len(raw) != 64 {
		return nil, errors.New("brainpool: raw signature must be 64 bytes")
	}
	var b cryptobyte.Builder
	b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1BigInt(new(big.Int).SetBytes(raw[:32]))
		b.AddASN1BigInt(new(big.Int).SetBytes(raw[32:]))
	})
	return b.Bytes()
}

// ASN1ToRaw converts a DER signature to r ‖ s; r and s must fit 32 bytes.
func ASN1ToRaw(sig []byte) ([]byte, error) {
	var r, s = new(big.Int), new(big.Int)
	in := cryptobyte.String(sig)
	var inner cryptobyte.String
	if !in.ReadASN1(&inner, cbasn1.SEQUENCE) || !in.Empty() ||
		!inner.ReadASN1Integer(r) || !inner.ReadASN1Integer(s) || !inner.Empty() {
		return nil, errors.New("brainpool: malformed ASN.1 signature")
	}
	if r.Sign() <= 0 || s.Sign() <= 0 || r.BitLen() > 256 || s.BitLen() > 256 {
		return nil, errors.New("brainpool: signature integers out of range")
	}
	out := make([]byte, 64)
	r.FillBytes(out[:32])
	s.FillBytes(out[32:])
	return out, nil
}

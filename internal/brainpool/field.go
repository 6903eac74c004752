package brainpool

import (
	"math/big"
	"math/bits"
)

// limbs is a 256-bit integer as four little-endian 64-bit words.
type limbs = [4]uint64

// modulus holds the constants of Montgomery arithmetic modulo an odd 256-bit
// prime (the field prime p or the group order n). Every operation below runs
// in time independent of the values of its operands: carries and borrows
// become masks, never branches. Only the exponent of pow (a public constant)
// steers a branch.
type modulus struct {
	m    limbs  // the modulus
	inv  uint64 // -m^-1 mod 2^64
	r2   limbs  // R^2 mod m, R = 2^256
	one  limbs  // R mod m (1 in Montgomery form)
	pinv limbs  // m-2, the Fermat inversion exponent
}

func newModulus(hex string) *modulus {
	m, ok := new(big.Int).SetString(hex, 16)
	if !ok || m.BitLen() > 256 || m.Bit(0) == 0 {
		panic("brainpool: bad modulus")
	}
	md := &modulus{m: bigToLimbs(m)}
	inv := md.m[0] // inverse mod 2^3 for odd numbers; Newton doubles the bits
	for i := 0; i < 6; i++ {
		inv *= 2 - md.m[0]*inv
	}
	md.inv = -inv
	R := new(big.Int).Lsh(big.NewInt(1), 256)
	md.one = bigToLimbs(new(big.Int).Mod(R, m))
	md.r2 = bigToLimbs(new(big.Int).Mod(new(big.Int).Mul(R, R), m))
	md.pinv = bigToLimbs(new(big.Int).Sub(m, big.NewInt(2)))
	return md
}

func bigToLimbs(b *big.Int) limbs {
	var buf [32]byte
	b.FillBytes(buf[:])
	return fromBytes(&buf)
}

// fromBytes reads 32 big-endian bytes.
func fromBytes(b *[32]byte) limbs {
	var z limbs
	for i := 0; i < 4; i++ {
		off := 24 - 8*i
		z[i] = uint64(b[off])<<56 | uint64(b[off+1])<<48 | uint64(b[off+2])<<40 | uint64(b[off+3])<<32 |
			uint64(b[off+4])<<24 | uint64(b[off+5])<<16 | uint64(b[off+6])<<8 | uint64(b[off+7])
	}
	return z
}

// toBytes writes 32 big-endian bytes.
func toBytes(x *limbs) [32]byte {
	var b [32]byte
	for i := 0; i < 4; i++ {
		off := 24 - 8*i
		v := x[i]
		for j := 7; j >= 0; j-- {
			b[off+j] = byte(v)
			v >>= 8
		}
	}
	return b
}

// lessThan returns 1 if x < m, else 0, in constant time.
func (md *modulus) lessThan(x *limbs) uint64 {
	var b uint64
	_, b = bits.Sub64(x[0], md.m[0], 0)
	_, b = bits.Sub64(x[1], md.m[1], b)
	_, b = bits.Sub64(x[2], md.m[2], b)
	_, b = bits.Sub64(x[3], md.m[3], b)
	return b
}

// reduceOnce returns x mod m for x < 2m (x given as 256 bits plus carry c).
func (md *modulus) reduceOnce(x *limbs, c uint64) limbs {
	var r limbs
	var b uint64
	r[0], b = bits.Sub64(x[0], md.m[0], 0)
	r[1], b = bits.Sub64(x[1], md.m[1], b)
	r[2], b = bits.Sub64(x[2], md.m[2], b)
	r[3], b = bits.Sub64(x[3], md.m[3], b)
	_, b = bits.Sub64(c, 0, b)
	// b == 1: x < m, keep x.
	return selectLimbs(b, x, &r)
}

// selectLimbs returns a if cond == 1, b if cond == 0.
func selectLimbs(cond uint64, a, b *limbs) limbs {
	mask := -cond
	return limbs{
		(a[0] & mask) | (b[0] &^ mask),
		(a[1] & mask) | (b[1] &^ mask),
		(a[2] & mask) | (b[2] &^ mask),
		(a[3] & mask) | (b[3] &^ mask),
	}
}

func isZero(x *limbs) uint64 {
	v := x[0] | x[1] | x[2] | x[3]
	return 1 ^ ((v | -v) >> 63)
}

func equal(x, y *limbs) uint64 {
	d := limbs{x[0] ^ y[0], x[1] ^ y[1], x[2] ^ y[2], x[3] ^ y[3]}
	return isZero(&d)
}

func (md *modulus) add(x, y *limbs) limbs {
	var s limbs
	var c uint64
	s[0], c = bits.Add64(x[0], y[0], 0)
	s[1], c = bits.Add64(x[1], y[1], c)
	s[2], c = bits.Add64(x[2], y[2], c)
	s[3], c = bits.Add64(x[3], y[3], c)
	return md.reduceOnce(&s, c)
}

func (md *modulus) sub(x, y *limbs) limbs {
	var d limbs
	var b uint64
	d[0], b = bits.Sub64(x[0], y[0], 0)
	d[1], b = bits.Sub64(x[1], y[1], b)
	d[2], b = bits.Sub64(x[2], y[2], b)
	d[3], b = bits.Sub64(x[3], y[3], b)
	mask := -b
	var c uint64
	d[0], c = bits.Add64(d[0], md.m[0]&mask, 0)
	d[1], c = bits.Add64(d[1], md.m[1]&mask, c)
	d[2], c = bits.Add64(d[2], md.m[2]&mask, c)
	d[3], _ = bits.Add64(d[3], md.m[3]&mask, c)
	return d
}

// mul returns x*y*R^-1 mod m (CIOS Montgomery multiplication).
func (md *modulus) mul(x, y *limbs) limbs {
	var t [6]uint64
	for i := 0; i < 4; i++ {
		var c, cc uint64
		for j := 0; j < 4; j++ {
			hi, lo := bits.Mul64(x[j], y[i])
			lo, cc = bits.Add64(lo, t[j], 0)
			hi += cc
			lo, cc = bits.Add64(lo, c, 0)
			hi += cc
			t[j] = lo
			c = hi
		}
		t[4], cc = bits.Add64(t[4], c, 0)
		t[5] = cc

		q := t[0] * md.inv
		hi, lo := bits.Mul64(q, md.m[0])
		_, cc = bits.Add64(lo, t[0], 0)
		c = hi + cc
		for j := 1; j < 4; j++ {
			hi, lo = bits.Mul64(q, md.m[j])
			lo, cc = bits.Add64(lo, t[j], 0)
			hi += cc
			lo, cc = bits.Add64(lo, c, 0)
			hi += cc
			t[j-1] = lo
			c = hi
		}
		t[3], cc = bits.Add64(t[4], c, 0)
		t[4] = t[5] + cc
		t[5] = 0
	}
	r := limbs{t[0], t[1], t[2], t[3]}
	return md.reduceOnce(&r, t[4])
}

func (md *modulus) sqr(x *limbs) limbs { return md.mul(x, x) }

// toMont converts a reduced integer to Montgomery form.
func (md *modulus) toMont(x *limbs) limbs { return md.mul(x, &md.r2) }

// fromMont converts out of Montgomery form.
func (md *modulus) fromMont(x *limbs) limbs {
	one := limbs{1}
	return md.mul(x, &one)
}

// pow returns x^e (Montgomery form in and out). e is public.
func (md *modulus) pow(x *limbs, e *limbs) limbs {
	z := md.one
	for i := 255; i >= 0; i-- {
		z = md.sqr(&z)
		if (e[i/64]>>(uint(i)%64))&1 == 1 {
			z = md.mul(&z, x)
		}
	}
	return z
}

// invert returns x^-1 (Montgomery form; 0 maps to 0) by Fermat's little theorem.
func (md *modulus) invert(x *limbs) limbs { return md.pow(x, &md.pinv) }

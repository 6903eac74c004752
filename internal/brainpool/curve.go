// Package brainpool implements the elliptic curve brainpoolP256r1 (RFC 5639)
// for the BDEW AS4 profile: ECDSA signing and verification and ECDH key
// agreement, with constant-time arithmetic on secret values.
//
// Go's standard library has no brainpool curves; the maintained Go
// implementations that have them (github.com/ProtonMail/go-crypto's brainpool
// package and others) build on the generic crypto/elliptic.CurveParams code,
// which is variable-time and deprecated for custom curves. This package uses
// Montgomery arithmetic on four 64-bit limbs with carries turned into masks,
// the complete projective addition formulas of Renes, Costello and Batina
// (2016, Algorithm 1, valid for any a on a prime-order curve) and a fixed
// 4-bit window scalar multiplication whose table is read with a
// constant-time select. The only branches depend on public values (exponents
// of the Fermat inversion, the validity of public inputs).
package brainpool

import (
	"errors"
)

// Curve constants of brainpoolP256r1 (RFC 5639 §3.4).
const (
	hexP  = "A9FB57DBA1EEA9BC3E660A909D838D726E3BF623D52620282013481D1F6E5377"
	hexA  = "7D5A0975FC2C3057EEF67530417AFFE7FB8055C126DC5C6CE94A4B44F330B5D9"
	hexB  = "26DC5C6CE94A4B44F330B5D9BBD77CBF958416295CF7E1CE6BCCDC18FF8C07B6"
	hexGx = "8BD2AEB9CB7E57CB2C4B482FFC81B7AFB9DE27E1E3BD23C23A4453BD9ACE3262"
	hexGy = "547EF835C3DAC4FD97F8461A14611DC9C27745132DED8E545C1D54C72F046997"
	hexN  = "A9FB57DBA1EEA9BC3E660A909D838D718C397AA3B561A6F7901E0E82974856A7"
)

var (
	fp = newModulus(hexP)
	fn = newModulus(hexN)

	curveA, curveB, curveB3 limbs // Montgomery form; b3 = 3b
	gen                     point
)

func init() {
	a := fp.toMont(ptr(bigToLimbs(mustHex(hexA))))
	b := fp.toMont(ptr(bigToLimbs(mustHex(hexB))))
	curveA, curveB = a, b
	b2 := fp.add(&b, &b)
	curveB3 = fp.add(&b2, &b)
	gen = point{
		x: fp.toMont(ptr(bigToLimbs(mustHex(hexGx)))),
		y: fp.toMont(ptr(bigToLimbs(mustHex(hexGy)))),
		z: fp.one,
	}
}

func ptr(l limbs) *limbs { return &l }

// point is a projective point (X:Y:Z), y = Y/Z, x = X/Z; Z = 0 is the identity.
type point struct{ x, y, z limbs }

func identity() point { return point{y: fp.one} }

// add is the complete addition of Renes–Costello–Batina, Algorithm 1 (for
// any curve constant a). It also doubles and handles the identity.
func add(p, q *point) point {
	m := fp
	t0 := m.mul(&p.x, &q.x)
	t1 := m.mul(&p.y, &q.y)
	t2 := m.mul(&p.z, &q.z)
	t3 := m.add(&p.x, &p.y)
	t4 := m.add(&q.x, &q.y)
	t3 = m.mul(&t3, &t4)
	t4 = m.add(&t0, &t1)
	t3 = m.sub(&t3, &t4)
	t4 = m.add(&p.x, &p.z)
	t5 := m.add(&q.x, &q.z)
	t4 = m.mul(&t4, &t5)
	t5 = m.add(&t0, &t2)
	t4 = m.sub(&t4, &t5)
	t5 = m.add(&p.y, &p.z)
	x3 := m.add(&q.y, &q.z)
	t5 = m.mul(&t5, &x3)
	x3 = m.add(&t1, &t2)
	t5 = m.sub(&t5, &x3)
	z3 := m.mul(&curveA, &t4)
	x3 = m.mul(&curveB3, &t2)
	z3 = m.add(&x3, &z3)
	x3 = m.sub(&t1, &z3)
	z3 = m.add(&t1, &z3)
	y3 := m.mul(&x3, &z3)
	t1 = m.add(&t0, &t0)
	t1 = m.add(&t1, &t0)
	t2 = m.mul(&curveA, &t2)
	t4 = m.mul(&curveB3, &t4)
	t1 = m.add(&t1, &t2)
	t2 = m.sub(&t0, &t2)
	t2 = m.mul(&curveA, &t2)
	t4 = m.add(&t4, &t2)
	t0 = m.mul(&t1, &t4)
	y3 = m.add(&y3, &t0)
	t0 = m.mul(&t5, &t4)
	x3 = m.mul(&t3, &x3)
	x3 = m.sub(&x3, &t0)
	t0 = m.mul(&t3, &t1)
	z3 = m.mul(&t5, &z3)
	z3 = m.add(&z3, &t0)
	return point{x3, y3, z3}
}

func selectPoint(cond uint64, a, b *point) point {
	return point{selectLimbs(cond, &a.x, &b.x), selectLimbs(cond, &a.y, &b.y), selectLimbs(cond, &a.z, &b.z)}
}

// scalarMult returns k·p for a 32-byte big-endian scalar k, with a fixed
// sequence of operations and a constant-time table lookup.
func scalarMult(p *point, k *[32]byte) point {
	var table [16]point
	table[0] = identity()
	table[1] = *p
	for i := 2; i < 16; i++ {
		table[i] = add(&table[i-1], p)
	}
	acc := identity()
	for i := 0; i < 64; i++ {
		if i > 0 {
			for j := 0; j < 4; j++ {
				acc = add(&acc, &acc)
			}
		}
		w := uint64(k[i/2])
		if i%2 == 0 {
			w >>= 4
		}
		w &= 15
		sel := identity()
		for j := uint64(0); j < 16; j++ {
			eq := ((j ^ w) - 1) >> 63 // 1 iff j == w (both < 16)
			sel = selectPoint(eq, &table[j], &sel)
		}
		acc = add(&acc, &sel)
	}
	return acc
}

// affine returns the affine coordinates (plain integers, big-endian) and
// whether p is the identity (1) or not (0).
func (p *point) affine() (x, y [32]byte, inf uint64) {
	zi := fp.invert(&p.z)
	ax := fp.mul(&p.x, &zi)
	ay := fp.mul(&p.y, &zi)
	ax = fp.fromMont(&ax)
	ay = fp.fromMont(&ay)
	return toBytes(&ax), toBytes(&ay), isZero(&p.z)
}

var errInvalidPoint = errors.New("brainpool: invalid point")

// decodePoint parses an uncompressed SEC 1 point 0x04 ‖ X ‖ Y and checks that
// it is on the curve (public input: branches are fine here).
func decodePoint(b []byte) (point, error) {
	if len(b) != 65 || b[0] != 4 {
		return point{}, errors.New("brainpool: point is not an uncompressed 65-byte SEC 1 point")
	}
	var xb, yb [32]byte
	copy(xb[:], b[1:33])
	copy(yb[:], b[33:])
	x, y := fromBytes(&xb), fromBytes(&yb)
	if fp.lessThan(&x) != 1 || fp.lessThan(&y) != 1 {
		return point{}, errInvalidPoint
	}
	x, y = fp.toMont(&x), fp.toMont(&y)
	// y² = x³ + ax + b
	lhs := fp.sqr(&y)
	rhs := fp.sqr(&x)
	rhs = fp.add(&rhs, &curveA)
	rhs = fp.mul(&rhs, &x)
	rhs = fp.add(&rhs, &curveB)
	if equal(&lhs, &rhs) != 1 {
		return point{}, errInvalidPoint
	}
	return point{x, y, fp.one}, nil
}

func encodePoint(x, y [32]byte) []byte {
	out := make([]byte, 65)
	out[0] = 4
	copy(out[1:], x[:])
	copy(out[33:], y[:])
	return out
}

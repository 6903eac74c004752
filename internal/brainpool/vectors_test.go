package brainpool

import (
	"crypto/sha256"
	"encoding/hex"
	"math/big"
	"testing"
)

// A subset of Wycheproof ecdsa_brainpoolP256r1_sha256_p1363_test.json
// (C2SP/wycheproof testvectors_v1, first test group), transcribed: it runs
// offline. TestWycheproofECDSA runs every case of the files.
func TestWycheproofECDSASubset(t *testing.T) {
	pubRaw, _ := hex.DecodeString("04019a2d9637743a63ddaefdbca0ee229a163b809b9b145e5313bbeb8defeab9d6548caf89bf5ba49499404145651234336401b9b2843a579ed152e090f11b9e59")
	pub, err := NewPublicKey(pubRaw)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := hex.DecodeString("313233343030")
	sum := sha256.Sum256(msg)
	for _, v := range []struct {
		id    int
		sig   string
		valid bool
	}{
		{1, "0a5f8c70ba2d0842d5d0f841f160ad15195769a8159bfe692634d73d469d111f426e857aad3ff7aa96e4d200c03b45f1846a36d089ee3917768ca1a0d6d4da6e", true},
		{2, "b45ae44c5c1bb1ff143702d28ee43a86a590e44bcafda560b652e5bfdde567c6678cd260f4aeb211a781388fdd48478007cf43d32b736de019916ce1c0737c39", false},
		{4, "9f9bcb6ae7c1a1796895124eac22e05c72e210fb9fc5a88e69e9374550ab4588678cd260f4aeb211a781388fdd48478007cf43d32b736de019916ce1c0737c39", false},
		{5, "010a5f8c70ba2d0842d5d0f841f160ad15195769a8159bfe692634d73d469d111f00678cd260f4aeb211a781388fdd48478007cf43d32b736de019916ce1c0737c39", false},
		{11, "00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000", false},
		{19, "00000000000000000000000000000000000000000000000000000000000000010000000000000000000000000000000000000000000000000000000000000001", false},
		{21, "0000000000000000000000000000000000000000000000000000000000000001a9fb57dba1eea9bc3e660a909d838d718c397aa3b561a6f7901e0e82974856a6", false},
		{27, "a9fb57dba1eea9bc3e660a909d838d718c397aa3b561a6f7901e0e82974856a7a9fb57dba1eea9bc3e660a909d838d718c397aa3b561a6f7901e0e82974856a7", false},
		{30, "a9fb57dba1eea9bc3e660a909d838d718c397aa3b561a6f7901e0e82974856a7a9fb57dba1eea9bc3e660a909d838d726e3bf623d52620282013481d1f6e5377", false},
	} {
		sig, _ := hex.DecodeString(v.sig)
		if got := VerifyRaw(pub, sum[:], sig); got != v.valid {
			t.Errorf("tcId %d: verify = %v, want %v", v.id, got, v.valid)
		}
	}
}

// TestVerifyLargeXCoordinate builds, as Wycheproof's "k*G has a large
// x-coordinate" and "r too large" vectors do, a signature whose point R has
// x ≥ n: r = x mod n must verify, r = x itself must not.
func TestVerifyLargeXCoordinate(t *testing.T) {
	p, a, b, n := mustHex(hexP), mustHex(hexA), mustHex(hexB), mustHex(hexN)
	// The largest x < p on the curve (p ≡ 3 mod 4: y = rhs^((p+1)/4)).
	exp := new(big.Int).Rsh(new(big.Int).Add(p, big.NewInt(1)), 2)
	var rx, ry *big.Int
	for x := new(big.Int).Sub(p, big.NewInt(1)); ; x.Sub(x, big.NewInt(1)) {
		rhs := new(big.Int).Exp(x, big.NewInt(3), p)
		rhs.Add(rhs, new(big.Int).Mul(a, x)).Add(rhs, b).Mod(rhs, p)
		y := new(big.Int).Exp(rhs, exp, p)
		if new(big.Int).Exp(y, big.NewInt(2), p).Cmp(rhs) == 0 {
			rx, ry = new(big.Int).Set(x), y
			break
		}
	}
	if rx.Cmp(n) < 0 {
		t.Fatal("no x ≥ n found")
	}
	digest := sha256.Sum256([]byte("123400"))
	e := new(big.Int).Mod(new(big.Int).SetBytes(digest[:]), n)
	r := new(big.Int).Mod(rx, n)
	s := new(big.Int).Sub(n, big.NewInt(3))
	// Q = r⁻¹(s·R − e·G)
	sx, sy := refMult(s, rx, ry)
	ex, ey := refMult(e, mustHex(hexGx), mustHex(hexGy))
	ey = new(big.Int).Sub(p, ey)
	tx, ty := refAdd(sx, sy, ex, ey)
	qx, qy := refMult(new(big.Int).ModInverse(r, n), tx, ty)
	raw := make([]byte, 65)
	raw[0] = 4
	qx.FillBytes(raw[1:33])
	qy.FillBytes(raw[33:])
	pub, err := NewPublicKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	if !VerifyRaw(pub, digest[:], sig) {
		t.Fatal("r = x mod n (x ≥ n) does not verify")
	}
	rx.FillBytes(sig[:32])
	if VerifyRaw(pub, digest[:], sig) {
		t.Fatal("r = x ≥ n verifies")
	}
}

package brainpool

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"math/big"
	"testing"

	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
)

// refAdd is textbook affine addition with math/big (nil is the identity).
func refAdd(x1, y1, x2, y2 *big.Int) (*big.Int, *big.Int) {
	p, a := mustHex(hexP), mustHex(hexA)
	if x1 == nil {
		return x2, y2
	}
	if x2 == nil {
		return x1, y1
	}
	var l *big.Int
	if x1.Cmp(x2) == 0 {
		if new(big.Int).Add(y1, y2).Mod(new(big.Int).Add(y1, y2), p).Sign() == 0 {
			return nil, nil
		}
		num := new(big.Int).Mul(x1, x1)
		num.Mul(num, big.NewInt(3)).Add(num, a)
		den := new(big.Int).Lsh(y1, 1)
		l = num.Mul(num, den.ModInverse(den, p))
	} else {
		num := new(big.Int).Sub(y2, y1)
		den := new(big.Int).Sub(x2, x1)
		den.Mod(den, p)
		l = num.Mul(num, den.ModInverse(den, p))
	}
	l.Mod(l, p)
	x3 := new(big.Int).Mul(l, l)
	x3.Sub(x3, x1).Sub(x3, x2).Mod(x3, p)
	y3 := new(big.Int).Sub(x1, x3)
	y3.Mul(y3, l).Sub(y3, y1).Mod(y3, p)
	return x3, y3
}

func refMult(k *big.Int, x, y *big.Int) (*big.Int, *big.Int) {
	var rx, ry *big.Int
	for i := k.BitLen() - 1; i >= 0; i-- {
		rx, ry = refAdd(rx, ry, rx, ry)
		if k.Bit(i) == 1 {
			rx, ry = refAdd(rx, ry, x, y)
		}
	}
	return rx, ry
}

func TestScalarMultMatchesReference(t *testing.T) {
	gx, gy := mustHex(hexGx), mustHex(hexGy)
	n := mustHex(hexN)
	ks := []*big.Int{big.NewInt(1), big.NewInt(2), big.NewInt(3), big.NewInt(15), big.NewInt(16), big.NewInt(17),
		new(big.Int).Sub(n, big.NewInt(1)), new(big.Int).Sub(n, big.NewInt(2))}
	for i := 0; i < 20; i++ {
		k, _ := rand.Int(rand.Reader, n)
		ks = append(ks, k)
	}
	for _, k := range ks {
		var kb [32]byte
		k.FillBytes(kb[:])
		p := scalarMult(&gen, &kb)
		x, y, inf := p.affine()
		wx, wy := refMult(k, gx, gy)
		if inf == 1 || new(big.Int).SetBytes(x[:]).Cmp(wx) != 0 || new(big.Int).SetBytes(y[:]).Cmp(wy) != 0 {
			t.Fatalf("k=%x: got (%x, %x), want (%x, %x)", k, x, y, wx, wy)
		}
	}
	var nb [32]byte
	n.FillBytes(nb[:])
	if p := scalarMult(&gen, &nb); isZero(&p.z) != 1 {
		t.Fatal("n·G is not the identity")
	}
	// P + (-P), P + P and O + O through the complete formula.
	neg := point{gen.x, fp.sub(&limbs{}, &gen.y), gen.z}
	if s := add(&gen, &neg); isZero(&s.z) != 1 {
		t.Fatal("G + (-G) is not the identity")
	}
	o := identity()
	if s := add(&o, &o); isZero(&s.z) != 1 {
		t.Fatal("O + O is not the identity")
	}
}

func TestFieldInvert(t *testing.T) {
	p := mustHex(hexP)
	for i := 0; i < 20; i++ {
		v, _ := rand.Int(rand.Reader, p)
		l := fp.toMont(ptr(bigToLimbs(v)))
		inv := fp.invert(&l)
		prod := fp.mul(&l, &inv)
		if v.Sign() != 0 && equal(&prod, &fp.one) != 1 {
			t.Fatalf("%x·%x⁻¹ != 1", v, v)
		}
	}
}

func TestECDSARoundTrip(t *testing.T) {
	k, err := GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("UNB+UNOC:3"))
	sig, err := k.SignRaw(rand.Reader, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	if !VerifyRaw(k.PublicKey(), sum[:], sig) {
		t.Fatal("own signature does not verify")
	}
	bad := bytes.Clone(sig)
	bad[5] ^= 1
	if VerifyRaw(k.PublicKey(), sum[:], bad) {
		t.Fatal("modified signature verifies")
	}
	other := sha256.Sum256([]byte("UNB+UNOC:4"))
	if VerifyRaw(k.PublicKey(), other[:], sig) {
		t.Fatal("signature verifies for another digest")
	}
	// r = n or s = 0 are out of range.
	nb := mustHex(hexN).FillBytes(make([]byte, 32))
	if VerifyRaw(k.PublicKey(), sum[:], append(nb, sig[32:]...)) || VerifyRaw(k.PublicKey(), sum[:], append(sig[:32:32], make([]byte, 32)...)) {
		t.Fatal("out-of-range r or s accepted")
	}
	der, _ := k.Sign(rand.Reader, sum[:], nil)
	if !VerifyASN1(k.PublicKey(), sum[:], der) {
		t.Fatal("ASN.1 signature does not verify")
	}
}

// A subset of the Wycheproof ecdh_brainpoolP256r1_test.json vectors
// (C2SP/wycheproof testvectors_v1), transcribed: the normal case and the
// shared-secret edge cases, plus an invalid-curve public key.
var wycheproofECDH = []struct {
	id           int
	public, priv string
	shared       string
	valid        bool
}{
	{1, "305a301406072a8648ce3d020106092b2403030208010107034200044cee5e1072b30d64f70bf01958e22c044a2127ddd744ce3060c15990ff0fe1148c6ee56559829a5a84dd5c8646ee0c43d0b7c50181f234ec09eba43bc86b169e",
		"0113db979e07d9c8fdbea5b06a682c0d2ad67170ffcb65d7547d8c442d3ac237", "3f00d9af7607fd32809ef7a4a30b396e3da9f465adf20597c9e2046f16a7b1be", true},
	{3, "305a301406072a8648ce3d020106092b2403030208010107034200041284e50ecda6c7c3a15ae79c318dec591da197fc32b7a046b168774013e54687156d96fe0765ea03404ecf5f6efc74b0792c05c11f9a683b97f5c7ca74f8a8c2",
		"06546f19660be42b6455813d02dab822a1c55529e43179dd5cb77cd16b2c4cf4", "0000000000000000000000000000000000000000000000000000000000000001", true},
	{4, "305a301406072a8648ce3d020106092b24030302080101070342000498577499d7a42f4dfe44c2757fd9932ec7e45a0d902e0bf1fe4ac09e705eb8e12d9b9a0092c9c92a661e24b2138b6a778324c9db815eb05621c54cd4d4b2e887",
		"06546f19660be42b6455813d02dab822a1c55529e43179dd5cb77cd16b2c4cf4", "0000000000000000000000000000000000000000000000000000000000000002", true},
	{6, "305a301406072a8648ce3d020106092b24030302080101070342000463e92d05cfcde1179188bff8ba2043beff5a30a1a6b8ec1dfcd8273ce2c330540607392bdd311a313e3ae53196b14480b1967a235ebdbf1827165477884b5be2",
		"06546f19660be42b6455813d02dab822a1c55529e43179dd5cb77cd16b2c4cf4", "a9fb57dba1eea9bc3e660a909d838d726e3bf623d52620282013481d1f6e5376", true},
	{7, "305a301406072a8648ce3d020106092b2403030208010107034200042b61eb39160947ebe4930eb0c03f818aa32aad05783a0b711e4e7f99f18a9668a9d5b705d04efe9dace514b7d58acb93762614b237018cc016287260428c7143",
		"06546f19660be42b6455813d02dab822a1c55529e43179dd5cb77cd16b2c4cf4", "a9fb57dba1eea9bc3e660a909d838d726e3bf623d52620282013481d1f6e5374", true},
	{10, "305a301406072a8648ce3d020106092b240303020801010703420004702d48185678874a4d8de4b9324e315bbbf005d6d3fa7fee74b30a278359d7dba1e00ed82f9d06766b05f754b2d2dafa7475306b95c987cf6b243ca1cebe4e6d",
		"06546f19660be42b6455813d02dab822a1c55529e43179dd5cb77cd16b2c4cf4", "0000000000000000000000000000000000000000000000010000000000000004", true},
}

func TestWycheproofECDHSubset(t *testing.T) {
	for _, v := range wycheproofECDH {
		pubDER, _ := hex.DecodeString(v.public)
		d, _ := hex.DecodeString(v.priv)
		pub, err := ParsePKIXPublicKey(pubDER)
		if err != nil {
			t.Fatalf("tcId %d: %v", v.id, err)
		}
		k, err := NewPrivateKey(d)
		if err != nil {
			t.Fatalf("tcId %d: %v", v.id, err)
		}
		z, err := k.ECDH(pub)
		if err != nil || hex.EncodeToString(z) != v.shared {
			t.Fatalf("tcId %d: shared %x (%v), want %s", v.id, z, err, v.shared)
		}
	}
	// Off-curve point (tcId 1 with Y changed): refused.
	der, _ := hex.DecodeString(wycheproofECDH[0].public)
	der[len(der)-1] ^= 1
	if _, err := ParsePKIXPublicKey(der); err == nil {
		t.Fatal("off-curve public key accepted")
	}
}

func BenchmarkSign(b *testing.B) {
	k, _ := GenerateKey(rand.Reader)
	sum := sha256.Sum256([]byte("m"))
	for b.Loop() {
		k.SignRaw(rand.Reader, sum[:])
	}
}

func BenchmarkVerify(b *testing.B) {
	k, _ := GenerateKey(rand.Reader)
	sum := sha256.Sum256([]byte("m"))
	sig, _ := k.SignRaw(rand.Reader, sum[:])
	for b.Loop() {
		VerifyRaw(k.PublicKey(), sum[:], sig)
	}
}

func BenchmarkECDH(b *testing.B) {
	k, _ := GenerateKey(rand.Reader)
	o, _ := GenerateKey(rand.Reader)
	for b.Loop() {
		k.ECDH(o.PublicKey())
	}
}

// TestParsePKIXPublicKeyStrictDER: a SubjectPublicKeyInfo is read as DER
// with nothing extra. encoding/asn1, used before, skipped elements appended
// inside a SEQUENCE (Wycheproof ECDH tcIds 343, 349, 410, 412, 418 and
// others, "acceptable" there, refused here). IsPKIXPublicKey still says
// such a key names brainpoolP256r1, so callers report it as malformed.
func TestParsePKIXPublicKeyStrictDER(t *testing.T) {
	der, _ := hex.DecodeString(wycheproofECDH[0].public)
	if _, err := ParsePKIXPublicKey(der); err != nil {
		t.Fatal(err)
	}
	alg, bits := der[2:2+22], der[2+22:] // SEQUENCE { 2 OIDs }, BIT STRING
	seq := func(parts ...[]byte) []byte {
		var b cryptobyte.Builder
		b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { b.AddBytes(bytes.Join(parts, nil)) })
		return b.BytesOrPanic()
	}
	unused := bytes.Clone(bits)
	unused[2] = 1 // one unused bit (the last bit of the point is 0)
	for name, b := range map[string][]byte{
		"NULL appended to the SEQUENCE":            seq(alg, bits, []byte{5, 0}),
		"NULL appended to the AlgorithmIdentifier": seq(seq(alg[2:], []byte{5, 0}), bits),
		"element repeated":                         seq(alg, bits, bits),
		"byte after the SEQUENCE":                  append(bytes.Clone(der), 0),
		"unused bits in the BIT STRING":            seq(alg, unused),
		"long-form length":                         append([]byte{0x30, 0x81, byte(len(der) - 2)}, der[2:]...),
	} {
		if _, err := ParsePKIXPublicKey(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if name != "long-form length" && !IsPKIXPublicKey(b) {
			t.Errorf("%s: IsPKIXPublicKey false", name)
		}
	}
}

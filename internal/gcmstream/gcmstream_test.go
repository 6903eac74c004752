package gcmstream

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	mrand "math/rand/v2"
	"testing"
)

// NIST GCM spec (McGrew–Viega) test cases 2 and 4.
func TestGCMStreamNISTVectors(t *testing.T) {
	for _, tc := range []struct{ key, iv, pt, aad, ct, tag string }{
		{"00000000000000000000000000000000", "000000000000000000000000", "00000000000000000000000000000000", "",
			"0388dace60b6a392f328c2b971b2fe78", "ab6e47d42cec13bdf53a67b21257bddf"},
		{"feffe9928665731c6d6a8f9467308308", "cafebabefacedbaddecaf888",
			"d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
			"feedfacedeadbeeffeedfacedeadbeefabaddad2",
			"42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091",
			"5bc94fbc3221a5db94fae95ae7121a47"},
	} {
		key, _ := hex.DecodeString(tc.key)
		iv, _ := hex.DecodeString(tc.iv)
		pt, _ := hex.DecodeString(tc.pt)
		aad, _ := hex.DecodeString(tc.aad)
		ct, _ := hex.DecodeString(tc.ct)
		tag, _ := hex.DecodeString(tc.tag)
		block, _ := aes.NewCipher(key)
		d, err := New(block, iv)
		if err != nil {
			t.Fatal(err)
		}
		got := append([]byte(nil), d.Decrypt(ct)...)
		if !bytes.Equal(got, pt) {
			t.Fatalf("plaintext %x, want %x", got, pt)
		}
		if err := d.Verify(aad, tag); err != nil {
			t.Fatalf("tag: %v", err)
		}
	}
}

// The streaming decrypter agrees with crypto/cipher's GCM for every length
// around the block and chunk boundaries, 12-byte and other nonces, with and
// without additional data, fed in random pieces; a changed bit anywhere
// fails the tag.
func TestGCMStreamMatchesCryptoCipher(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 15, 16, 17, Chunk - 1, Chunk, Chunk + 1, 3*Chunk + 77} {
		for _, nonceLen := range []int{12, 8, 16, 20} {
			for _, aadLen := range []int{0, 13, 40} {
				key := make([]byte, 32)
				rand.Read(key)
				nonce := make([]byte, nonceLen)
				rand.Read(nonce)
				pt := make([]byte, n)
				rand.Read(pt)
				aad := make([]byte, aadLen)
				rand.Read(aad)
				block, _ := aes.NewCipher(key)
				aead, _ := cipher.NewGCMWithNonceSize(block, nonceLen)
				sealed := aead.Seal(nil, nonce, pt, aad)
				ct, tag := sealed[:n], sealed[n:]
				d, err := New(block, nonce)
				if err != nil {
					t.Fatal(err)
				}
				var got []byte
				for rest := ct; len(rest) > 0; {
					k := min(len(rest), 1+rng.IntN(70000))
					got = append(got, d.Decrypt(rest[:k])...)
					rest = rest[k:]
				}
				if !bytes.Equal(got, pt) {
					t.Fatalf("n=%d nonce=%d aad=%d: plaintext differs", n, nonceLen, aadLen)
				}
				if err := d.Verify(aad, tag); err != nil {
					t.Fatalf("n=%d nonce=%d aad=%d: %v", n, nonceLen, aadLen, err)
				}
				if n > 0 {
					bad := append([]byte(nil), ct...)
					bad[rng.IntN(n)] ^= 1 << rng.IntN(8)
					d, _ := New(block, nonce)
					d.Decrypt(bad)
					if err := d.Verify(aad, tag); !errors.Is(err, ErrAuth) {
						t.Fatalf("n=%d: a flipped ciphertext bit passed: %v", n, err)
					}
				}
				if aadLen > 0 {
					d, _ := New(block, nonce)
					d.Decrypt(ct)
					bad := append([]byte(nil), aad...)
					bad[0] ^= 1
					if err := d.Verify(bad, tag); !errors.Is(err, ErrAuth) {
						t.Fatalf("a changed AAD passed: %v", err)
					}
				}
			}
		}
	}
}

// GCM's counter increments only its low 32 bits; CTR mode all 128. The
// keystream wraps the low word as GCM does.
func TestGCMStreamCounterWrapsLow32Bits(t *testing.T) {
	key := make([]byte, 16)
	rand.Read(key)
	block, _ := aes.NewCipher(key)
	d, err := New(block, make([]byte, 12))
	if err != nil {
		t.Fatal(err)
	}
	for i := range d.j0 {
		d.j0[i] = 0xab
	}
	binary.BigEndian.PutUint32(d.j0[12:], 0xfffffffd)
	d.ctrNext = d.j0
	d.restartCTR(true)
	ct := make([]byte, 100)
	got := append([]byte(nil), d.Decrypt(ct)...)
	var want []byte
	ctr := d.j0
	for len(want) < len(ct) {
		binary.BigEndian.PutUint32(ctr[12:], binary.BigEndian.Uint32(ctr[12:])+1)
		var ks [16]byte
		block.Encrypt(ks[:], ctr[:])
		want = append(want, ks[:]...)
	}
	if !bytes.Equal(got, want[:len(ct)]) {
		t.Fatalf("keystream across the wrap:\n got %x\nwant %x", got, want[:len(ct)])
	}
}

// Encrypt produces crypto/cipher's ciphertext and tag, fed in pieces.
func TestGCMStreamEncryptMatchesCryptoCipher(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 16, 17, Chunk + 5, 2*Chunk + 1} {
		key := make([]byte, 16)
		rand.Read(key)
		nonce := make([]byte, 12)
		rand.Read(nonce)
		pt := make([]byte, n)
		rand.Read(pt)
		block, _ := aes.NewCipher(key)
		aead, _ := cipher.NewGCM(block)
		want := aead.Seal(nil, nonce, pt, nil)
		s, err := New(block, nonce)
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		for rest := pt; len(rest) > 0; {
			k := min(len(rest), 1+rng.IntN(70000))
			ct := make([]byte, k)
			s.Encrypt(ct, rest[:k])
			got = append(got, ct...)
			rest = rest[k:]
		}
		tag := s.Tag(nil)
		got = append(got, tag[:]...)
		if !bytes.Equal(got, want) {
			t.Fatalf("n=%d: sealed output differs", n)
		}
	}
}

package xmlenc

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestKeyWrapRFC3394 checks the six test vectors of RFC 3394 §4.1–§4.6 in both
// directions.
func TestKeyWrapRFC3394(t *testing.T) {
	const (
		kek128 = "000102030405060708090A0B0C0D0E0F"
		kek192 = "000102030405060708090A0B0C0D0E0F1011121314151617"
		kek256 = "000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F"
		key128 = "00112233445566778899AABBCCDDEEFF"
		key192 = "00112233445566778899AABBCCDDEEFF0001020304050607"
		key256 = "00112233445566778899AABBCCDDEEFF000102030405060708090A0B0C0D0E0F"
	)
	vectors := []struct {
		name, kek, key, wrapped string
	}{
		{"4.1 128-bit key with 128-bit KEK", kek128, key128, "1FA68B0A8112B447 AEF34BD8FB5A7B82 9D3E862371D2CFE5"},
		{"4.2 128-bit key with 192-bit KEK", kek192, key128, "96778B25AE6CA435 F92B5B97C050AED2 468AB8A17AD84E5D"},
		{"4.3 128-bit key with 256-bit KEK", kek256, key128, "64E8C3F9CE0F5BA2 63E9777905818A2A 93C8191E7D6E8AE7"},
		{"4.4 192-bit key with 192-bit KEK", kek192, key192, "031D33264E15D332 68F24EC260743EDC E1C6C7DDEE725A93 6BA814915C6762D2"},
		{"4.5 192-bit key with 256-bit KEK", kek256, key192, "A8F9BC1612C68B3F F6E6F4FBE30E71E4 769C8B80A32CB895 8CD5D17D6B254DA1"},
		{"4.6 256-bit key with 256-bit KEK", kek256, key256, "28C9F404C4B810F4 CBCCB35CFB87F826 3F5786E2D80ED326 CBC7F0E71A99F43B FB988B9B7A02DD21"},
	}
	for _, v := range vectors {
		t.Run(v.name, func(t *testing.T) {
			kek, key, want := unhex(t, v.kek), unhex(t, v.key), unhex(t, v.wrapped)
			got, err := KeyWrap(kek, key)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("wrap = %X, want %X", got, want)
			}
			back, err := KeyUnwrap(kek, want)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back, key) {
				t.Fatalf("unwrap = %X, want %X", back, key)
			}
			// Any single flipped bit must fail the integrity check.
			for i := range want {
				bad := bytes.Clone(want)
				bad[i] ^= 0x01
				if _, err := KeyUnwrap(kek, bad); !errors.Is(err, errKeyWrapIntegrity) {
					t.Fatalf("flipped byte %d: err = %v, want integrity failure", i, err)
				}
			}
		})
	}
}

func TestKeyWrapRejects(t *testing.T) {
	kek := make([]byte, 16)
	for _, n := range []int{0, 8, 15, 17} {
		if _, err := KeyWrap(kek, make([]byte, n)); err == nil {
			t.Errorf("KeyWrap accepted a %d-byte key", n)
		}
	}
	for _, n := range []int{0, 8, 16, 23, 25} {
		if _, err := KeyUnwrap(kek, make([]byte, n)); err == nil {
			t.Errorf("KeyUnwrap accepted %d bytes", n)
		}
	}
	if _, err := KeyWrap(make([]byte, 7), make([]byte, 16)); err == nil {
		t.Error("KeyWrap accepted a 7-byte KEK")
	}
	wrapped, _ := KeyWrap(kek, make([]byte, 16))
	otherKEK := bytes.Repeat([]byte{1}, 16)
	if _, err := KeyUnwrap(otherKEK, wrapped); !errors.Is(err, errKeyWrapIntegrity) {
		t.Errorf("wrong KEK: err = %v", err)
	}
}

package xmlenc

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// FuzzKeyUnwrap feeds arbitrary wrapped keys (a partner's EncryptedKey
// CipherValue after ECDH-ES, or an xenc:AgreementMethod's) to KeyUnwrap
// under a 128-, 192- or 256-bit KEK: no panic, and a key that unwraps is
// 8 bytes shorter and wraps back to the same bytes.
func FuzzKeyUnwrap(f *testing.F) {
	kek, _ := hex.DecodeString("000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F")
	for _, v := range []struct {
		size    uint8 // 0, 1, 2: a 128-, 192-, 256-bit KEK (RFC 3394 §4.1, 4.2, 4.3, 4.6)
		wrapped string
	}{
		{0, "1FA68B0A8112B447AEF34BD8FB5A7B829D3E862371D2CFE5"},
		{1, "96778B25AE6CA435F92B5B97C050AED2468AB8A17AD84E5D"},
		{2, "64E8C3F9CE0F5BA263E9777905818A2A93C8191E7D6E8AE7"},
		{2, "28C9F404C4B810F4CBCCB35CFB87F8263F5786E2D80ED326CBC7F0E71A99F43BFB988B9B7A02DD21"},
		{0, "00"},
		{0, ""},
	} {
		b, _ := hex.DecodeString(v.wrapped)
		f.Add(v.size, b)
	}
	f.Fuzz(func(t *testing.T, size uint8, wrapped []byte) {
		k := kek[:16+8*int(size%3)]
		key, err := KeyUnwrap(k, wrapped)
		if err != nil {
			return
		}
		if len(key) != len(wrapped)-8 {
			t.Fatalf("%d bytes unwrapped from %d", len(key), len(wrapped))
		}
		again, err := KeyWrap(k, key)
		if err != nil || !bytes.Equal(again, wrapped) {
			t.Fatalf("unwrapped key wraps to %x (%v), not %x", again, err, wrapped)
		}
	})
}

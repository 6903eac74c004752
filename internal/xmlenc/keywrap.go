package xmlenc

import (
	"crypto/aes"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
)

// keyWrapIV is the RFC 3394 §2.2.3.1 default initial value A6A6A6A6A6A6A6A6.
var keyWrapIV = [8]byte{0xA6, 0xA6, 0xA6, 0xA6, 0xA6, 0xA6, 0xA6, 0xA6}

// errKeyWrapIntegrity reports an RFC 3394 integrity check failure.
var errKeyWrapIntegrity = errors.New("keywrap: integrity check failed")

// maxWrappedKey bounds the key material accepted by KeyWrap/KeyUnwrap; content
// keys are at most 32 bytes, so anything far larger is not a key.
const maxWrappedKey = 1024

// KeyWrap wraps key with the AES key-encryption key kek (16, 24 or 32 bytes)
// using the RFC 3394 AES Key Wrap algorithm (index-based form, §2.2.1). key
// must be a multiple of 8 bytes and at least 16 bytes long. The result is 8
// bytes longer than key.
func KeyWrap(kek, key []byte) ([]byte, error) {
	if len(key) < 16 || len(key)%8 != 0 || len(key) > maxWrappedKey {
		return nil, fmt.Errorf("keywrap: key length %d is not a multiple of 8 between 16 and %d", len(key), maxWrappedKey)
	}
	block, err := aes.NewCipher(kek)
	if err != nil {
		return nil, fmt.Errorf("keywrap: %w", err)
	}
	n := len(key) / 8
	out := make([]byte, 8+len(key))
	copy(out[8:], key)
	var a [8]byte = keyWrapIV
	var b [16]byte
	for j := 0; j < 6; j++ {
		for i := 1; i <= n; i++ {
			copy(b[:8], a[:])
			copy(b[8:], out[8*i:8*i+8])
			block.Encrypt(b[:], b[:])
			t := uint64(n*j + i)
			binary.BigEndian.PutUint64(a[:], binary.BigEndian.Uint64(b[:8])^t)
			copy(out[8*i:8*i+8], b[8:])
		}
	}
	copy(out[:8], a[:])
	return out, nil
}

// KeyUnwrap reverses KeyWrap (RFC 3394 §2.2.2) and checks the integrity value.
// It returns an error, never a partial key, if kek is wrong or wrapped was
// altered.
func KeyUnwrap(kek, wrapped []byte) ([]byte, error) {
	if len(wrapped) < 24 || len(wrapped)%8 != 0 || len(wrapped) > maxWrappedKey+8 {
		return nil, fmt.Errorf("keywrap: wrapped key length %d is invalid", len(wrapped))
	}
	block, err := aes.NewCipher(kek)
	if err != nil {
		return nil, fmt.Errorf("keywrap: %w", err)
	}
	n := len(wrapped)/8 - 1
	out := make([]byte, 8*n)
	copy(out, wrapped[8:])
	var a [8]byte
	copy(a[:], wrapped[:8])
	var b [16]byte
	for j := 5; j >= 0; j-- {
		for i := n; i >= 1; i-- {
			t := uint64(n*j + i)
			binary.BigEndian.PutUint64(b[:8], binary.BigEndian.Uint64(a[:])^t)
			copy(b[8:], out[8*(i-1):8*i])
			block.Decrypt(b[:], b[:])
			copy(a[:], b[:8])
			copy(out[8*(i-1):8*i], b[8:])
		}
	}
	if subtle.ConstantTimeCompare(a[:], keyWrapIV[:]) != 1 {
		clear(out)
		return nil, errKeyWrapIntegrity
	}
	return out, nil
}

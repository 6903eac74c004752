package certs

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/des"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"hash"
	"math/big"
	"unicode/utf16"

	"github.com/edigateway/gateway/internal/brainpool"
)

// certOnlyPKCS12 reads the certificates of a PKCS#12 file without a
// private key, as `openssl pkcs12 -export -nokeys` writes it: neither
// go-pkcs12 nor x/crypto/pkcs12 reads one. Supported: unencrypted safes,
// PBES2 (PBKDF2 with HMAC-SHA1/256/384/512, AES-128/192/256-CBC: OpenSSL
// 3's default) and pbeWithSHAAnd3-KeyTripleDES-CBC; the MAC (SHA-1 or
// SHA-2) is verified first, so a wrong password is reported as such.
// RC2 (openssl -legacy) is not supported.
func certOnlyPKCS12(b []byte, password string) ([]*x509.Certificate, error) {
	var pfx struct {
		Version  int
		AuthSafe contentInfo
		MacData  macData `asn1:"optional"`
	}
	if rest, err := asn1.Unmarshal(b, &pfx); err != nil || len(rest) != 0 {
		return nil, fmt.Errorf("PKCS#12: %v", errOr(err, "trailing data"))
	}
	if !pfx.AuthSafe.ContentType.Equal(oidData) {
		return nil, errors.New("PKCS#12: public-key integrity mode is not supported")
	}
	var authSafe []byte
	if _, err := asn1.Unmarshal(pfx.AuthSafe.Content.Bytes, &authSafe); err != nil {
		return nil, fmt.Errorf("PKCS#12: authSafe: %w", err)
	}
	bmp := bmpPassword(password)
	if len(pfx.MacData.Mac.Digest) > 0 {
		if err := verifyMAC(pfx.MacData, authSafe, bmp); err != nil {
			return nil, err
		}
	}
	var infos []contentInfo
	if _, err := asn1.Unmarshal(authSafe, &infos); err != nil {
		return nil, fmt.Errorf("PKCS#12: authenticated safe: %w", err)
	}
	var certs []*x509.Certificate
	for _, ci := range infos {
		var safe []byte
		switch {
		case ci.ContentType.Equal(oidData):
			if _, err := asn1.Unmarshal(ci.Content.Bytes, &safe); err != nil {
				return nil, fmt.Errorf("PKCS#12: safe contents: %w", err)
			}
		case ci.ContentType.Equal(oidEncryptedData):
			var ed struct {
				Version int
				Info    struct {
					ContentType asn1.ObjectIdentifier
					Algorithm   pkix.AlgorithmIdentifier
					Content     []byte `asn1:"tag:0,optional"`
				}
			}
			if _, err := asn1.Unmarshal(ci.Content.Bytes, &ed); err != nil {
				return nil, fmt.Errorf("PKCS#12: encrypted data: %w", err)
			}
			var err error
			if safe, err = decryptSafe(ed.Info.Algorithm, ed.Info.Content, password, bmp); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("PKCS#12: content type %s is not supported", ci.ContentType)
		}
		var bags []struct {
			ID    asn1.ObjectIdentifier
			Value asn1.RawValue `asn1:"tag:0,explicit"`
			Attrs asn1.RawValue `asn1:"optional"`
		}
		if _, err := asn1.Unmarshal(safe, &bags); err != nil {
			if ci.ContentType.Equal(oidEncryptedData) {
				return nil, ErrWrongPassword // decrypted to garbage
			}
			return nil, fmt.Errorf("PKCS#12: safe bags: %w", err)
		}
		for _, bag := range bags {
			if !bag.ID.Equal(oidCertBag) {
				continue
			}
			var cb struct {
				ID    asn1.ObjectIdentifier
				Value []byte `asn1:"tag:0,explicit"`
			}
			inner := bag.Value.FullBytes
			if bag.Value.Class == asn1.ClassContextSpecific {
				inner = bag.Value.Bytes // the explicit [0] is kept by encoding/asn1
			}
			if _, err := asn1.Unmarshal(inner, &cb); err != nil || !cb.ID.Equal(oidX509Cert) {
				continue
			}
			c, err := brainpool.ParseCertificate(cb.Value)
			if err != nil {
				return nil, fmt.Errorf("PKCS#12: certificate: %w", err)
			}
			certs = append(certs, c)
		}
	}
	if len(certs) == 0 {
		return nil, ErrNoCertificate
	}
	return certs, nil
}

var (
	oidData          = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 1}
	oidEncryptedData = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 6}
	oidCertBag       = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 12, 10, 1, 3}
	oidX509Cert      = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 22, 1}
	oidPBES2         = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 5, 13}
	oidPBKDF2        = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 5, 12}
	oidPBE3DES       = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 12, 1, 3}
	oidSHA1          = asn1.ObjectIdentifier{1, 3, 14, 3, 2, 26}
	oidSHA256        = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 1}
	oidSHA384        = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 2}
	oidSHA512        = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 3}
	oidHMACSHA1      = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 7}
	oidHMACSHA256    = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 9}
	oidHMACSHA384    = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 10}
	oidHMACSHA512    = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 11}
	oidAES128CBC     = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 2}
	oidAES192CBC     = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 22}
	oidAES256CBC     = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 42}
)

type contentInfo struct {
	ContentType asn1.ObjectIdentifier
	Content     asn1.RawValue `asn1:"tag:0,explicit,optional"`
}

type macData struct {
	Mac struct {
		Algorithm pkix.AlgorithmIdentifier
		Digest    []byte
	}
	Salt       []byte
	Iterations int `asn1:"optional,default:1"`
}

func errOr(err error, s string) any {
	if err != nil {
		return err
	}
	return s
}

// maxIterations bounds the work a file can ask for.
const maxIterations = 2_000_000

func hashFor(oid asn1.ObjectIdentifier) (func() hash.Hash, int, bool) {
	switch {
	case oid.Equal(oidSHA1), oid.Equal(oidHMACSHA1):
		return sha1.New, 64, true
	case oid.Equal(oidSHA256), oid.Equal(oidHMACSHA256):
		return sha256.New, 64, true
	case oid.Equal(oidSHA384), oid.Equal(oidHMACSHA384):
		return sha512.New384, 128, true
	case oid.Equal(oidSHA512), oid.Equal(oidHMACSHA512):
		return sha512.New, 128, true
	}
	return nil, 0, false
}

func verifyMAC(m macData, content, bmp []byte) error {
	h, v, ok := hashFor(m.Mac.Algorithm.Algorithm)
	if !ok {
		return fmt.Errorf("PKCS#12: MAC algorithm %s is not supported", m.Mac.Algorithm.Algorithm)
	}
	if m.Iterations < 1 || m.Iterations > maxIterations {
		return fmt.Errorf("PKCS#12: MAC iteration count %d", m.Iterations)
	}
	key := pkcs12KDF(h, v, m.Salt, bmp, m.Iterations, 3, h().Size())
	mac := hmac.New(h, key)
	mac.Write(content)
	if subtle.ConstantTimeCompare(mac.Sum(nil), m.Mac.Digest) != 1 {
		return ErrWrongPassword
	}
	return nil
}

func decryptSafe(alg pkix.AlgorithmIdentifier, ct []byte, password string, bmp []byte) ([]byte, error) {
	var block cipher.Block
	var iv []byte
	switch {
	case alg.Algorithm.Equal(oidPBES2):
		var params struct {
			KDF, Scheme pkix.AlgorithmIdentifier
		}
		if _, err := asn1.Unmarshal(alg.Parameters.FullBytes, &params); err != nil || !params.KDF.Algorithm.Equal(oidPBKDF2) {
			return nil, fmt.Errorf("PKCS#12: PBES2 parameters: %v", errOr(err, "key derivation is not PBKDF2"))
		}
		var kdf struct {
			Salt       []byte
			Iterations int
			KeyLength  int                      `asn1:"optional"`
			PRF        pkix.AlgorithmIdentifier `asn1:"optional"`
		}
		if _, err := asn1.Unmarshal(params.KDF.Parameters.FullBytes, &kdf); err != nil {
			return nil, fmt.Errorf("PKCS#12: PBKDF2 parameters: %w", err)
		}
		if kdf.Iterations < 1 || kdf.Iterations > maxIterations {
			return nil, fmt.Errorf("PKCS#12: PBKDF2 iteration count %d", kdf.Iterations)
		}
		prf := kdf.PRF.Algorithm
		if len(prf) == 0 {
			prf = oidHMACSHA1
		}
		h, _, ok := hashFor(prf)
		if !ok {
			return nil, fmt.Errorf("PKCS#12: PBKDF2 PRF %s is not supported", prf)
		}
		var size int
		switch s := params.Scheme.Algorithm; {
		case s.Equal(oidAES128CBC):
			size = 16
		case s.Equal(oidAES192CBC):
			size = 24
		case s.Equal(oidAES256CBC):
			size = 32
		default:
			return nil, fmt.Errorf("PKCS#12: encryption %s is not supported", s)
		}
		if _, err := asn1.Unmarshal(params.Scheme.Parameters.FullBytes, &iv); err != nil || len(iv) != aes.BlockSize {
			return nil, errors.New("PKCS#12: AES-CBC IV")
		}
		key, err := pbkdf2.Key(h, password, kdf.Salt, kdf.Iterations, size)
		if err != nil {
			return nil, fmt.Errorf("PKCS#12: PBKDF2: %w", err)
		}
		if block, err = aes.NewCipher(key); err != nil {
			return nil, err
		}
	case alg.Algorithm.Equal(oidPBE3DES):
		var params struct {
			Salt       []byte
			Iterations int
		}
		if _, err := asn1.Unmarshal(alg.Parameters.FullBytes, &params); err != nil {
			return nil, fmt.Errorf("PKCS#12: PBE parameters: %w", err)
		}
		if params.Iterations < 1 || params.Iterations > maxIterations {
			return nil, fmt.Errorf("PKCS#12: PBE iteration count %d", params.Iterations)
		}
		key := pkcs12KDF(sha1.New, 64, params.Salt, bmp, params.Iterations, 1, 24)
		iv = pkcs12KDF(sha1.New, 64, params.Salt, bmp, params.Iterations, 2, 8)
		var err error
		if block, err = des.NewTripleDESCipher(key); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("PKCS#12: encryption %s is not supported (RC2 files: export the certificate as PEM or DER)", alg.Algorithm)
	}
	bs := block.BlockSize()
	if len(ct) == 0 || len(ct)%bs != 0 {
		return nil, errors.New("PKCS#12: encrypted content is not a whole number of blocks")
	}
	pt := make([]byte, len(ct))
	cipher.NewCBCDecrypter(block, iv).CryptBlocks(pt, ct)
	n := int(pt[len(pt)-1])
	if n == 0 || n > bs {
		return nil, ErrWrongPassword
	}
	for _, c := range pt[len(pt)-n:] {
		if int(c) != n {
			return nil, ErrWrongPassword
		}
	}
	return pt[:len(pt)-n], nil
}

// bmpPassword is the password as a BMPString with a terminating zero
// (RFC 7292 Appendix B.1); the empty password is empty.
func bmpPassword(s string) []byte {
	if s == "" {
		return nil
	}
	u := utf16.Encode([]rune(s))
	out := make([]byte, 0, 2*len(u)+2)
	for _, c := range u {
		out = append(out, byte(c>>8), byte(c))
	}
	return append(out, 0, 0)
}

// pkcs12KDF is the key derivation of RFC 7292 Appendix B.2.
func pkcs12KDF(h func() hash.Hash, v int, salt, password []byte, iterations int, id byte, size int) []byte {
	d := make([]byte, v)
	for i := range d {
		d[i] = id
	}
	fill := func(b []byte) []byte {
		if len(b) == 0 {
			return nil
		}
		out := make([]byte, v*((len(b)+v-1)/v))
		for i := range out {
			out[i] = b[i%len(b)]
		}
		return out
	}
	I := append(fill(salt), fill(password)...)
	u := h().Size()
	var out []byte
	one := big.NewInt(1)
	for len(out) < size {
		hh := h()
		hh.Write(d)
		hh.Write(I)
		a := hh.Sum(nil)
		for j := 1; j < iterations; j++ {
			hh = h()
			hh.Write(a)
			a = hh.Sum(nil)
		}
		out = append(out, a...)
		if len(out) >= size {
			break
		}
		// I_j = (I_j + B + 1) mod 2^(8v) for each v-byte block of I.
		b := make([]byte, v)
		for i := range b {
			b[i] = a[i%u]
		}
		bn := new(big.Int).SetBytes(b)
		bn.Add(bn, one)
		for j := 0; j < len(I); j += v {
			ij := new(big.Int).SetBytes(I[j : j+v])
			ij.Add(ij, bn)
			ib := ij.Bytes()
			if len(ib) > v {
				ib = ib[len(ib)-v:]
			}
			for k := range v {
				I[j+k] = 0
			}
			copy(I[j+v-len(ib):j+v], ib)
		}
	}
	return out[:size]
}

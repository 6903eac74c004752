package xmlenc

import (
	"crypto"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/internal/brainpool"
)

// ConcatKDF is the single-step key derivation of NIST SP 800-56A rev. 3
// §5.8.2.1 (the "Concatenation KDF" of XML Encryption 1.1 §5.4.1): K(i) =
// H(counter_i ‖ Z ‖ OtherInfo) with a 32-bit big-endian counter from 1, the
// first keyLen bytes of K(1) ‖ K(2) ‖ … .
func ConcatKDF(h crypto.Hash, z, otherInfo []byte, keyLen int) ([]byte, error) {
	if !h.Available() {
		return nil, errors.New("xmlenc: ConcatKDF digest not available")
	}
	if keyLen <= 0 || keyLen > 255*h.Size() {
		return nil, fmt.Errorf("xmlenc: ConcatKDF key length %d out of range", keyLen)
	}
	out := make([]byte, 0, keyLen+h.Size())
	var ctr [4]byte
	for i := uint32(1); len(out) < keyLen; i++ {
		binary.BigEndian.PutUint32(ctr[:], i)
		d := h.New()
		d.Write(ctr[:])
		d.Write(z)
		d.Write(otherInfo)
		out = d.Sum(out)
	}
	clear(out[keyLen:])
	return out[:keyLen], nil
}

// concatKDFBitString decodes one ConcatKDFParams attribute: hexBinary whose
// first octet is the number of padding bits (0–7) in the last octet, which
// must be zero (XML Encryption 1.1 §5.4.1). An absent or empty attribute is
// the empty string.
func concatKDFBitString(e *etree.Element, name string) ([]byte, error) {
	v := strings.TrimSpace(attr(e, name))
	if v == "" {
		return nil, nil
	}
	if len(v) > 2048 {
		return nil, fail(ErrLimit, "ConcatKDFParams %s too long", name)
	}
	b, err := hex.DecodeString(v)
	if err != nil || len(b) == 0 {
		return nil, fail(ErrMalformed, "ConcatKDFParams %s is not hexBinary", name)
	}
	pad := b[0]
	if pad > 7 || (pad > 0 && len(b) == 1) {
		return nil, fail(ErrMalformed, "ConcatKDFParams %s: %d padding bits", name, pad)
	}
	if pad > 0 && b[len(b)-1]&(1<<pad-1) != 0 {
		return nil, fail(ErrMalformed, "ConcatKDFParams %s: padding bits are not zero", name)
	}
	return b[1:], nil
}

// unwrapECDHES opens an EncryptedKey whose key was wrapped with a KEK agreed
// by ECDH-ES on brainpoolP256r1 and derived with ConcatKDF.
func (d *decryptor) unwrapECDHES(am *etree.Element, wrapAlg string, kp KeyPair, wrapped []byte, u *UsedKey) ([]byte, error) {
	kdm, err := keyDerivation(am, AlgECDHES, AlgConcatKDF, u)
	if err != nil {
		return nil, err
	}
	params := child(kdm, NSXEnc11, "ConcatKDFParams")
	if params == nil {
		return nil, fail(ErrMalformed, "ConcatKDF without ConcatKDFParams")
	}
	dm := child(params, NSDSig, "DigestMethod")
	if dm == nil {
		return nil, fail(ErrMalformed, "ConcatKDFParams without DigestMethod")
	}
	u.KDFDigest = attr(dm, "Algorithm")
	h, ok := digestAlgs[u.KDFDigest]
	if !ok || h == crypto.SHA1 {
		return nil, fail(ErrUnsupported, "ConcatKDF digest %s", truncate(u.KDFDigest))
	}
	if err := d.permit(wrapAlg, u.AgreementMethod, u.KeyDerivation, u.KDFDigest); err != nil {
		return nil, err
	}
	var otherInfo []byte
	for _, name := range []string{"AlgorithmID", "PartyUInfo", "PartyVInfo", "SuppPubInfo", "SuppPrivInfo"} {
		b, err := concatKDFBitString(params, name)
		if err != nil {
			return nil, err
		}
		otherInfo = append(otherInfo, b...)
	}
	pub, err := brainpoolOriginatorKey(child(am, NSXEnc, "OriginatorKeyInfo"))
	if err != nil {
		return nil, err
	}
	priv, ok := kp.Key.(*brainpool.PrivateKey)
	if !ok {
		return nil, fail(ErrNoKey, "key cannot agree on brainpoolP256r1")
	}
	if err := d.spendPrivateOperation(); err != nil {
		return nil, err
	}
	shared, err := priv.ECDH(pub)
	if err != nil {
		return nil, fail(ErrDecrypt, "ECDH-ES key agreement failed")
	}
	kek, err := ConcatKDF(h, shared, otherInfo, keyWrapSizes[wrapAlg])
	clear(shared)
	if err != nil {
		return nil, fail(ErrDecrypt, "ConcatKDF failed")
	}
	return unwrapKEK(kek, wrapped)
}

// brainpoolOriginatorKey extracts the sender's ephemeral public key from
// xenc:OriginatorKeyInfo: dsig11:ECKeyValue (NamedCurve
// urn:oid:1.3.36.3.3.2.8.1.1.7 and an uncompressed PublicKey), directly or in
// ds:KeyValue, or dsig11:DEREncodedKeyValue. A key on another curve is
// refused as unsupported (EBMS:0103), a broken one as malformed.
func brainpoolOriginatorKey(oki *etree.Element) (*brainpool.PublicKey, error) {
	if oki == nil {
		return nil, fail(ErrMalformed, "AgreementMethod without OriginatorKeyInfo")
	}
	holders := []*etree.Element{oki}
	if kv := child(oki, NSDSig, "KeyValue"); kv != nil {
		holders = append(holders, kv)
	}
	for _, h := range holders {
		if ec := child(h, NSDSig11, "ECKeyValue"); ec != nil {
			return parseECKeyValue(ec)
		}
		if der := child(h, NSDSig11, "DEREncodedKeyValue"); der != nil {
			b, err := decodeBase64(der.Text())
			if err != nil || len(b) > 1024 {
				return nil, fail(ErrMalformed, "DEREncodedKeyValue is not base64")
			}
			if !brainpool.IsPKIXPublicKey(b) {
				return nil, fail(ErrUnsupported, "originator key is not on brainpoolP256r1")
			}
			k, err := brainpool.ParsePKIXPublicKey(b)
			if err != nil {
				return nil, fail(ErrMalformed, "originator key: %v", err)
			}
			return k, nil
		}
	}
	return nil, fail(ErrMalformed, "OriginatorKeyInfo carries no EC public key")
}

// parseECKeyValue reads a dsig11:ECKeyValue on brainpoolP256r1.
func parseECKeyValue(ec *etree.Element) (*brainpool.PublicKey, error) {
	if child(ec, NSDSig11, "ECParameters") != nil {
		return nil, fail(ErrUnsupported, "ECKeyValue with explicit ECParameters")
	}
	nc := child(ec, NSDSig11, "NamedCurve")
	pk := child(ec, NSDSig11, "PublicKey")
	if nc == nil || pk == nil {
		return nil, fail(ErrMalformed, "ECKeyValue lacks NamedCurve or PublicKey")
	}
	if uri := strings.TrimSpace(attr(nc, "URI")); uri != brainpool.NamedCurveURI {
		return nil, fail(ErrUnsupported, "ECDH-ES on curve %s (brainpoolP256r1 only)", truncate(uri))
	}
	if len(pk.Text()) > 1024 {
		return nil, fail(ErrLimit, "ECKeyValue PublicKey too long")
	}
	b, err := decodeBase64(pk.Text())
	if err != nil {
		return nil, fail(ErrMalformed, "ECKeyValue PublicKey is not base64")
	}
	k, err := brainpool.NewPublicKey(b)
	if err != nil {
		return nil, fail(ErrMalformed, "originator key: %v", err)
	}
	return k, nil
}

// writeECDHES fills ds:KeyInfo of an EncryptedKey with an ECDH-ES
// AgreementMethod (ConcatKDF SHA-256, ephemeral key as dsig11:ECKeyValue) for
// the brainpoolP256r1 recipient, and returns the wrapped content key and the
// RecipientKeyInfo to name the recipient in.
func (e *encryptor) writeECDHES(ki *etree.Element) (wrapped []byte, recipientKeyInfo *etree.Element, err error) {
	am := sub(ki, "xenc", NSXEnc, "AgreementMethod")
	am.CreateAttr("Algorithm", AlgECDHES)
	kdm := sub(am, "xenc11", NSXEnc11, "KeyDerivationMethod")
	kdm.CreateAttr("Algorithm", AlgConcatKDF)
	params := sub(kdm, "xenc11", NSXEnc11, "ConcatKDFParams")
	// AlgorithmID is the key-wrap URI as a bit string without padding
	// (XML Encryption 1.1 §5.4.1). PartyUInfo and PartyVInfo are left out,
	// as WSS4J (and so phase4) leaves them out: they are optional in the
	// schema and empty in OtherInfo. "00", the empty bit string, is valid
	// XML Encryption 1.1 too, but Apache Santuario's ConcatKDF (behind
	// WSS4J and phase4) refuses any value shorter than two octets
	// (KeyDerivation.TooShortParameter), so the BDEW receivers built on it
	// could not derive the key. Santuario reads an absent attribute as
	// the empty bit string; so do we (concatKDFBitString).
	algID := append([]byte{0}, e.o.KeyWrap...)
	params.CreateAttr("AlgorithmID", hex.EncodeToString(algID))
	sub(params, "ds", NSDSig, "DigestMethod").CreateAttr("Algorithm", AlgSHA256)

	eph, err := brainpool.GenerateKey(e.rnd)
	if err != nil {
		return nil, nil, fmt.Errorf("ECDH-ES: %w", err)
	}
	oki := sub(am, "xenc", NSXEnc, "OriginatorKeyInfo")
	ec := sub(sub(oki, "ds", NSDSig, "KeyValue"), "dsig11", NSDSig11, "ECKeyValue")
	sub(ec, "dsig11", NSDSig11, "NamedCurve").CreateAttr("URI", brainpool.NamedCurveURI)
	sub(ec, "dsig11", NSDSig11, "PublicKey").SetText(base64.StdEncoding.EncodeToString(eph.PublicKey().Bytes()))
	rki := sub(am, "xenc", NSXEnc, "RecipientKeyInfo")

	shared, err := eph.ECDH(e.bpPub)
	if err != nil {
		return nil, nil, fmt.Errorf("ECDH-ES: %w", err)
	}
	kek, err := ConcatKDF(crypto.SHA256, shared, algID[1:], keyWrapSizes[e.o.KeyWrap])
	clear(shared)
	if err != nil {
		return nil, nil, err
	}
	wrapped, err = KeyWrap(kek, e.cek)
	clear(kek)
	return wrapped, rki, err
}

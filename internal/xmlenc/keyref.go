package xmlenc

import (
	"bytes"
	"crypto"
	"crypto/ecdh"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"math/big"
	"slices"
	"strings"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/internal/brainpool"
)

// KeyPair is one of our decryption keys with its certificate. Key is an
// *rsa.PrivateKey (or any crypto.Decrypter with an RSA public key) for
// RSA-OAEP key transport, or an *ecdh.PrivateKey on X25519 (or anything with
// an ECDH(*ecdh.PublicKey) method) for eDelivery AS4 2.0 key agreement. Pass
// several KeyPairs during a certificate rollover.
type KeyPair struct {
	Cert *x509.Certificate
	Key  crypto.PrivateKey
}

// Key reference forms, as reported in UsedKey.Reference.
const (
	RefIssuerSerial    = "X509IssuerSerial"
	RefSubjectKeyID    = "SubjectKeyIdentifier" // wsse:KeyIdentifier X509SubjectKeyIdentifier
	RefX509SKI         = "X509SKI"              // ds:X509Data/ds:X509SKI (the BDEW AS4 profile's form)
	RefThumbprintSHA1  = "ThumbprintSHA1"
	RefX509Certificate = "X509Certificate"
	RefBinarySecToken  = "BinarySecurityToken"
	RefNone            = "none"
)

const maxKeyRefsPerKeyInfo = 16

// keyRef is one way a KeyInfo names the recipient certificate.
type keyRef struct {
	form    string
	issuer  string
	serial  *big.Int
	ski     []byte
	thumb   []byte
	certDER []byte
}

func (r keyRef) matches(c *x509.Certificate) bool {
	if c == nil {
		return false
	}
	switch r.form {
	case RefIssuerSerial:
		return c.SerialNumber != nil && r.serial.Cmp(c.SerialNumber) == 0 && sameDN(r.issuer, c)
	case RefSubjectKeyID, RefX509SKI:
		return bytes.Equal(r.ski, subjectKeyID(c))
	case RefThumbprintSHA1:
		sum := sha1.Sum(c.Raw)
		return bytes.Equal(r.thumb, sum[:])
	case RefX509Certificate, RefBinarySecToken:
		return bytes.Equal(r.certDER, c.Raw)
	}
	return false
}

// subjectKeyID returns the certificate's SubjectKeyIdentifier extension or,
// when absent, the RFC 5280 §4.2.1.2 method (1) value: SHA-1 of the
// subjectPublicKey BIT STRING.
func subjectKeyID(c *x509.Certificate) []byte {
	if len(c.SubjectKeyId) > 0 {
		return c.SubjectKeyId
	}
	var spki struct {
		Algorithm asn1.RawValue
		PublicKey asn1.BitString
	}
	if _, err := asn1.Unmarshal(c.RawSubjectPublicKeyInfo, &spki); err != nil {
		return nil
	}
	sum := sha1.Sum(spki.PublicKey.Bytes)
	return sum[:]
}

// parseKeyRefs reads the certificate references below a ds:KeyInfo or
// xenc:RecipientKeyInfo element: wsse:SecurityTokenReference (X509Data,
// KeyIdentifier, Reference to a BinarySecurityToken) and ds:X509Data.
func parseKeyRefs(ki *etree.Element, ix *idIndex) ([]keyRef, error) {
	var refs []keyRef
	add := func(r keyRef) error {
		if len(refs) >= maxKeyRefsPerKeyInfo {
			return fail(ErrLimit, "more than %d key references", maxKeyRefsPerKeyInfo)
		}
		refs = append(refs, r)
		return nil
	}
	for _, c := range ki.ChildElements() {
		switch {
		case is(c, NSWSSE, "SecurityTokenReference"):
			for _, s := range c.ChildElements() {
				switch {
				case is(s, NSDSig, "X509Data"):
					if err := x509DataRefs(s, add); err != nil {
						return nil, err
					}
				case is(s, NSWSSE, "KeyIdentifier"):
					r, err := keyIdentifierRef(s)
					if err != nil {
						return nil, err
					}
					if err := add(r); err != nil {
						return nil, err
					}
				case is(s, NSWSSE, "Reference"):
					r, err := bstRef(s, ix)
					if err != nil {
						return nil, err
					}
					if err := add(r); err != nil {
						return nil, err
					}
				}
			}
		case is(c, NSDSig, "X509Data"):
			if err := x509DataRefs(c, add); err != nil {
				return nil, err
			}
		}
	}
	return refs, nil
}

func x509DataRefs(xd *etree.Element, add func(keyRef) error) error {
	for _, c := range xd.ChildElements() {
		var r keyRef
		switch {
		case is(c, NSDSig, "X509IssuerSerial"):
			name := child(c, NSDSig, "X509IssuerName")
			num := child(c, NSDSig, "X509SerialNumber")
			if name == nil || num == nil {
				return fail(ErrMalformed, "X509IssuerSerial lacks X509IssuerName or X509SerialNumber")
			}
			s := strings.TrimSpace(num.Text())
			if len(s) > 200 {
				return fail(ErrMalformed, "X509SerialNumber too long")
			}
			serial, ok := new(big.Int).SetString(s, 10)
			if !ok {
				return fail(ErrMalformed, "X509SerialNumber %q is not a decimal integer", truncate(s))
			}
			r = keyRef{form: RefIssuerSerial, issuer: strings.TrimSpace(name.Text()), serial: serial}
		case is(c, NSDSig, "X509SKI"):
			b, err := decodeBase64(c.Text())
			if err != nil {
				return fail(ErrMalformed, "X509SKI is not base64")
			}
			r = keyRef{form: RefX509SKI, ski: b}
		case is(c, NSDSig, "X509Certificate"):
			b, err := decodeBase64(c.Text())
			if err != nil {
				return fail(ErrMalformed, "X509Certificate is not base64")
			}
			r = keyRef{form: RefX509Certificate, certDER: b}
		default:
			continue
		}
		if err := add(r); err != nil {
			return err
		}
	}
	return nil
}

func keyIdentifierRef(ki *etree.Element) (keyRef, error) {
	if enc := attr(ki, "EncodingType"); enc != "" && enc != encodingBase64 {
		return keyRef{}, fail(ErrUnsupported, "KeyIdentifier EncodingType %q", truncate(enc))
	}
	b, err := decodeBase64(ki.Text())
	if err != nil {
		return keyRef{}, fail(ErrMalformed, "KeyIdentifier is not base64")
	}
	switch vt := attr(ki, "ValueType"); vt {
	case valueTypeSKI:
		return keyRef{form: RefSubjectKeyID, ski: b}, nil
	case valueTypeThumbprint:
		return keyRef{form: RefThumbprintSHA1, thumb: b}, nil
	case valueTypeX509v3:
		return keyRef{form: RefX509Certificate, certDER: b}, nil
	default:
		return keyRef{}, fail(ErrUnsupported, "KeyIdentifier ValueType %q", truncate(vt))
	}
}

// bstRef resolves a wsse:Reference to a wsse:BinarySecurityToken holding an
// X.509 certificate.
func bstRef(ref *etree.Element, ix *idIndex) (keyRef, error) {
	target, err := ix.lookup(attr(ref, "URI"))
	if err != nil {
		return keyRef{}, err
	}
	if !is(target, NSWSSE, "BinarySecurityToken") {
		return keyRef{}, fail(ErrMalformed, "security token reference %q does not name a BinarySecurityToken", truncate(attr(ref, "URI")))
	}
	if vt := attr(target, "ValueType"); vt != valueTypeX509v3 {
		return keyRef{}, fail(ErrUnsupported, "BinarySecurityToken ValueType %q", truncate(vt))
	}
	if enc := attr(target, "EncodingType"); enc != "" && enc != encodingBase64 {
		return keyRef{}, fail(ErrUnsupported, "BinarySecurityToken EncodingType %q", truncate(enc))
	}
	der, err := decodeBase64(target.Text())
	if err != nil {
		return keyRef{}, fail(ErrMalformed, "BinarySecurityToken is not base64")
	}
	return keyRef{form: RefBinarySecToken, certDER: der}, nil
}

// keyKind classifies a KeyPair.
type keyKind int

const (
	kindNone keyKind = iota
	kindRSA
	kindX25519
	kindBrainpool // brainpoolP256r1 ECDH-ES (BDEW AS4)
)

// ecdhKey is the X25519 private-key operation we need; *ecdh.PrivateKey has it.
type ecdhKey interface {
	ECDH(remote *ecdh.PublicKey) ([]byte, error)
}

func kindOf(kp KeyPair) keyKind {
	switch k := kp.Key.(type) {
	case *rsa.PrivateKey:
		return kindRSA
	case *brainpool.PrivateKey:
		return kindBrainpool
	case *ecdh.PrivateKey:
		if k.Curve() == ecdh.X25519() {
			return kindX25519
		}
		return kindNone
	case crypto.Decrypter:
		if _, ok := k.Public().(*rsa.PublicKey); ok {
			return kindRSA
		}
	}
	if _, ok := kp.Key.(ecdhKey); ok {
		return kindX25519
	}
	return kindNone
}

// usageAllows reports whether the key usage of kp's certificate allows the
// operation its kind performs: key encipherment (RSA key transport) or key
// agreement (X25519, brainpoolP256r1 ECDH-ES). A certificate without the
// extension allows both (RFC 5280 §4.2.1.3).
func usageAllows(kp KeyPair, k keyKind) bool {
	if kp.Cert == nil || kp.Cert.KeyUsage == 0 {
		return true
	}
	switch k {
	case kindRSA:
		return kp.Cert.KeyUsage&x509.KeyUsageKeyEncipherment != 0
	case kindX25519, kindBrainpool:
		return kp.Cert.KeyUsage&x509.KeyUsageKeyAgreement != 0
	}
	return false
}

// usageName is the key usage a key of kind k needs to decrypt.
func usageName(k keyKind) string {
	if k == kindRSA {
		return "keyEncipherment"
	}
	return "keyAgreement"
}

// candidates returns the keys of kind k named by refs; with no refs at all
// (a KeyInfo without a usable reference) every key of kind k is a candidate.
// The matched reference form is returned alongside each key. A key whose
// certificate's key usage does not allow the operation is never a
// candidate; forbidden is the first such key that refs name (-1: none).
func candidates(refs []keyRef, keys []KeyPair, k keyKind) (out []int, forms []string, forbidden int) {
	forbidden = -1
	for i, kp := range keys {
		if kindOf(kp) != k {
			continue
		}
		allowed := usageAllows(kp, k)
		if len(refs) == 0 {
			if allowed {
				out, forms = append(out, i), append(forms, RefNone)
			}
			continue
		}
		for _, r := range refs {
			if r.matches(kp.Cert) {
				if allowed {
					out, forms = append(out, i), append(forms, r.form)
				} else if forbidden < 0 {
					forbidden = i
				}
				break
			}
		}
	}
	return out, forms, forbidden
}

// sameDN compares an RFC 4514/2253 distinguished name string with the issuer
// of c, ignoring RDN order, attribute-type aliases, case and surplus spaces.
func sameDN(s string, c *x509.Certificate) bool {
	got, ok := parseDN(s)
	if !ok {
		return false
	}
	var want []string
	for _, atv := range c.Issuer.Names {
		v, ok := atv.Value.(string)
		if !ok {
			return false
		}
		want = append(want, dnTypeName(atv.Type.String())+"="+normValue(v))
	}
	slices.Sort(got)
	slices.Sort(want)
	return slices.Equal(got, want)
}

var dnOIDNames = map[string]string{
	"2.5.4.3":                    "CN",
	"2.5.4.4":                    "SN",
	"2.5.4.5":                    "SERIALNUMBER",
	"2.5.4.6":                    "C",
	"2.5.4.7":                    "L",
	"2.5.4.8":                    "ST",
	"2.5.4.9":                    "STREET",
	"2.5.4.10":                   "O",
	"2.5.4.11":                   "OU",
	"2.5.4.12":                   "T",
	"2.5.4.42":                   "GIVENNAME",
	"2.5.4.97":                   "ORGANIZATIONIDENTIFIER",
	"0.9.2342.19200300.100.1.1":  "UID",
	"0.9.2342.19200300.100.1.25": "DC",
	"1.2.840.113549.1.9.1":       "EMAILADDRESS",
}

var dnAliases = map[string]string{
	"S":             "ST",
	"E":             "EMAILADDRESS",
	"EMAIL":         "EMAILADDRESS",
	"TITLE":         "T",
	"SURNAME":       "SN",
	"G":             "GIVENNAME",
	"USERID":        "UID",
	"STREETADDRESS": "STREET",
}

func dnTypeName(t string) string {
	t = strings.ToUpper(strings.TrimSpace(t))
	t = strings.TrimPrefix(t, "OID.")
	if n, ok := dnOIDNames[t]; ok {
		return n
	}
	if n, ok := dnAliases[t]; ok {
		return n
	}
	return t
}

func normValue(v string) string {
	return strings.ToLower(strings.Join(strings.Fields(v), " "))
}

// parseDN splits an RFC 4514 string into normalised "TYPE=value" entries.
func parseDN(s string) ([]string, bool) {
	if len(s) > 4096 {
		return nil, false
	}
	var out []string
	i := 0
	for i < len(s) {
		// attribute type
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			return nil, false
		}
		typ := dnTypeName(s[i : i+eq])
		if typ == "" {
			return nil, false
		}
		i += eq + 1
		for i < len(s) && s[i] == ' ' {
			i++
		}
		var val strings.Builder
		switch {
		case i < len(s) && s[i] == '#':
			j := i + 1
			for j < len(s) && s[j] != ',' && s[j] != '+' && s[j] != ';' {
				j++
			}
			v, ok := berString(strings.TrimSpace(s[i+1 : j]))
			if !ok {
				return nil, false
			}
			val.WriteString(v)
			i = j
		case i < len(s) && s[i] == '"':
			j := i + 1
			for j < len(s) && s[j] != '"' {
				if s[j] == '\\' && j+1 < len(s) {
					j++
				}
				val.WriteByte(s[j])
				j++
			}
			if j >= len(s) {
				return nil, false
			}
			i = j + 1
			for i < len(s) && s[i] == ' ' {
				i++
			}
		default:
			for i < len(s) && s[i] != ',' && s[i] != '+' && s[i] != ';' {
				if s[i] == '\\' {
					if i+1 >= len(s) {
						return nil, false
					}
					if i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
						b, _ := hex.DecodeString(s[i+1 : i+3])
						val.Write(b)
						i += 3
						continue
					}
					val.WriteByte(s[i+1])
					i += 2
					continue
				}
				val.WriteByte(s[i])
				i++
			}
		}
		out = append(out, typ+"="+normValue(val.String()))
		if i < len(s) {
			if s[i] != ',' && s[i] != '+' && s[i] != ';' {
				return nil, false
			}
			i++
			for i < len(s) && s[i] == ' ' {
				i++
			}
		}
	}
	return out, len(out) > 0
}

func isHex(b byte) bool {
	return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F')
}

// berString decodes the "#hex" BER form of a string attribute value.
func berString(h string) (string, bool) {
	b, err := hex.DecodeString(h)
	if err != nil {
		return "", false
	}
	var rv asn1.RawValue
	if rest, err := asn1.Unmarshal(b, &rv); err != nil || len(rest) != 0 {
		return "", false
	}
	switch rv.Tag {
	case asn1.TagUTF8String, asn1.TagPrintableString, asn1.TagIA5String, asn1.TagT61String, asn1.TagNumericString:
		return string(rv.Bytes), true
	}
	return "", false
}

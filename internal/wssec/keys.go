package wssec

import (
	"bytes"
	"crypto/sha1"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"math/big"
	"strings"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/internal/brainpool"
	"github.com/edigateway/gateway/internal/trust"
)

// ResolveSigner identifies the signer certificate from the ds:KeyInfo of the
// signature and returns it only if it is one of trusted (the partner's
// configured certificates). Supported key references, inside a
// wsse:SecurityTokenReference or directly in ds:KeyInfo:
//   - wsse:Reference URI="#id" to a wsse:BinarySecurityToken (X509v3): the
//     token must be byte-equal to a trusted certificate;
//   - ds:X509Data/ds:X509IssuerSerial, ds:X509Data/ds:X509SKI;
//   - wsse:KeyIdentifier with ValueType X509SubjectKeyIdentifier,
//     ThumbprintSHA1 or X509v3;
//   - ds:X509Data/ds:X509Certificate (byte-equal to a trusted certificate).
//
// An unknown signer is ErrFailedAuthentication; an unsupported reference form
// ErrPolicyNoncompliance.
func (s *Signature) ResolveSigner(trusted []*x509.Certificate) (*x509.Certificate, error) {
	ki, err := childElement(s.Element, NamespaceDSig, "KeyInfo")
	if err != nil {
		return nil, err
	}
	if ki == nil {
		return nil, authErr("signature has no ds:KeyInfo; signer cannot be identified")
	}
	kids := ki.ChildElements()
	if len(kids) != 1 {
		return nil, policyErr("ds:KeyInfo has %d children, expected one key reference", len(kids))
	}
	k := kids[0]
	switch {
	case isElement(k, NamespaceWSSE, "SecurityTokenReference"):
		refs := k.ChildElements()
		if len(refs) != 1 {
			return nil, policyErr("wsse:SecurityTokenReference has %d children, expected one", len(refs))
		}
		return s.resolveTokenReference(refs[0], trusted)
	case isElement(k, NamespaceDSig, "X509Data"):
		return resolveX509Data(k, trusted)
	}
	return nil, policyErr("key reference {%s}%s not supported", elementNS(k), k.Tag)
}

func (s *Signature) resolveTokenReference(r *etree.Element, trusted []*x509.Certificate) (*x509.Certificate, error) {
	switch {
	case isElement(r, NamespaceWSSE, "Reference"):
		uri, _ := attrValue(r, "", "URI")
		if vt, ok := attrValue(r, "", "ValueType"); ok && vt != ValueTypeX509v3 && vt != ValueTypeX509PKIPathv1 {
			return nil, policyErr("wsse:Reference ValueType %q not supported", vt)
		}
		if !strings.HasPrefix(uri, "#") || len(uri) < 2 {
			return nil, policyErr("wsse:Reference URI %q is not a same-document reference", uri)
		}
		bst := s.ids[uri[1:]]
		if bst == nil {
			return nil, authErr("wsse:Reference %q: no such token", uri)
		}
		if !isElement(bst, NamespaceWSSE, "BinarySecurityToken") {
			return nil, policyErr("wsse:Reference %q points at {%s}%s, not a BinarySecurityToken", uri, elementNS(bst), bst.Tag)
		}
		vt, _ := attrValue(bst, "", "ValueType")
		if vt != ValueTypeX509v3 && vt != ValueTypeX509PKIPathv1 {
			return nil, policyErr("BinarySecurityToken ValueType %q not supported", vt)
		}
		if enc, ok := attrValue(bst, "", "EncodingType"); ok && enc != EncodingBase64Binary {
			return nil, policyErr("BinarySecurityToken EncodingType %q not supported", enc)
		}
		s.tokenType = vt
		if vt == ValueTypeX509PKIPathv1 {
			return matchPKIPath(bst.Text(), trusted)
		}
		return matchCertificate(bst.Text(), trusted)
	case isElement(r, NamespaceWSSE, "KeyIdentifier"):
		vt, _ := attrValue(r, "", "ValueType")
		if enc, ok := attrValue(r, "", "EncodingType"); ok && enc != EncodingBase64Binary {
			return nil, policyErr("KeyIdentifier EncodingType %q not supported", enc)
		}
		if vt == ValueTypeX509v3 {
			return matchCertificate(r.Text(), trusted)
		}
		id, err := decodeBase64(r.Text())
		if err != nil {
			return nil, authErrCause(err, "KeyIdentifier is not base64")
		}
		switch vt {
		case ValueTypeX509SKI:
			return matchSKI(id, trusted)
		case ValueTypeThumbprintSHA:
			for _, c := range trusted {
				if sum := sha1.Sum(c.Raw); bytes.Equal(sum[:], id) {
					return c, nil
				}
			}
			return nil, unknownSignerErr("signer (SHA-1 thumbprint %x) is not a trusted certificate", id)
		}
		return nil, policyErr("KeyIdentifier ValueType %q not supported", vt)
	case isElement(r, NamespaceDSig, "X509Data"):
		return resolveX509Data(r, trusted)
	}
	return nil, policyErr("security token reference {%s}%s not supported", elementNS(r), r.Tag)
}

func resolveX509Data(d *etree.Element, trusted []*x509.Certificate) (*x509.Certificate, error) {
	kids := d.ChildElements()
	if len(kids) != 1 {
		return nil, policyErr("ds:X509Data has %d children, expected one", len(kids))
	}
	k := kids[0]
	switch {
	case isElement(k, NamespaceDSig, "X509IssuerSerial"):
		in, err := childElement(k, NamespaceDSig, "X509IssuerName")
		if err != nil {
			return nil, err
		}
		sn, err := childElement(k, NamespaceDSig, "X509SerialNumber")
		if err != nil {
			return nil, err
		}
		if in == nil || sn == nil {
			return nil, policyErr("ds:X509IssuerSerial without issuer name or serial number")
		}
		serial, ok := new(big.Int).SetString(strings.TrimSpace(sn.Text()), 10)
		if !ok {
			return nil, authErr("X509SerialNumber %q is not a decimal integer", sn.Text())
		}
		issuer := strings.TrimSpace(in.Text())
		for _, c := range trusted {
			if c.SerialNumber.Cmp(serial) == 0 && issuerMatches(issuer, c) {
				return c, nil
			}
		}
		return nil, unknownSignerErr("signer (issuer %q, serial %s) is not a trusted certificate", issuer, serial)
	case isElement(k, NamespaceDSig, "X509SKI"):
		id, err := decodeBase64(k.Text())
		if err != nil {
			return nil, authErrCause(err, "X509SKI is not base64")
		}
		return matchSKI(id, trusted)
	case isElement(k, NamespaceDSig, "X509Certificate"):
		return matchCertificate(k.Text(), trusted)
	}
	return nil, policyErr("ds:X509Data child {%s}%s not supported", elementNS(k), k.Tag)
}

// matchCertificate decodes a base64 DER certificate and returns the trusted
// certificate that is byte-equal to it.
func matchCertificate(b64 string, trusted []*x509.Certificate) (*x509.Certificate, error) {
	der, err := decodeBase64(b64)
	if err != nil {
		return nil, authErrCause(err, "certificate token is not base64")
	}
	for _, c := range trusted {
		if bytes.Equal(c.Raw, der) {
			return c, nil
		}
	}
	if cert, err := brainpool.ParseCertificate(der); err == nil {
		return nil, unknownSignerErr("signer %q (serial %s) is not a trusted certificate", cert.Subject.String(), trust.Serial(cert))
	}
	return nil, unknownSignerErr("signer certificate token is not a trusted certificate")
}

func matchSKI(id []byte, trusted []*x509.Certificate) (*x509.Certificate, error) {
	for _, c := range trusted {
		if bytes.Equal(subjectKeyID(c), id) {
			return c, nil
		}
	}
	return nil, unknownSignerErr("signer (subject key identifier %x) is not a trusted certificate", id)
}

// subjectKeyID returns the certificate's SubjectKeyIdentifier extension, or
// the RFC 5280 §4.2.1.2 method 1 value (SHA-1 of the subjectPublicKey bits)
// when it has none.
func subjectKeyID(c *x509.Certificate) []byte {
	if len(c.SubjectKeyId) > 0 {
		return c.SubjectKeyId
	}
	var spki struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}
	if _, err := asn1.Unmarshal(c.RawSubjectPublicKeyInfo, &spki); err != nil {
		return nil
	}
	sum := sha1.Sum(spki.PublicKey.Bytes)
	return sum[:]
}

// issuerMatches compares an RFC 4514/2253 distinguished name string with the
// certificate's issuer: the same attribute types and values (values compared
// case-insensitively with whitespace runs collapsed), in string order (most
// specific first) or in ASN.1 order.
func issuerMatches(dn string, c *x509.Certificate) bool {
	parsed, ok := parseDN(dn)
	if !ok {
		return false
	}
	var rdns pkix.RDNSequence
	if rest, err := asn1.Unmarshal(c.RawIssuer, &rdns); err != nil || len(rest) != 0 {
		return false
	}
	var certATVs []dnATV
	for _, rdn := range rdns {
		for _, atv := range rdn {
			v, ok := atv.Value.(string)
			if !ok {
				return false
			}
			certATVs = append(certATVs, dnATV{atv.Type.String(), normalizeDNValue(v)})
		}
	}
	if len(parsed) != len(certATVs) {
		return false
	}
	reversed, forward := true, true
	for i := range parsed {
		if parsed[i] != certATVs[len(certATVs)-1-i] {
			reversed = false
		}
		if parsed[i] != certATVs[i] {
			forward = false
		}
	}
	return reversed || forward
}

type dnATV struct{ oid, value string }

var dnAttributeOIDs = map[string]string{
	"CN": "2.5.4.3", "SN": "2.5.4.4", "SURNAME": "2.5.4.4", "SERIALNUMBER": "2.5.4.5",
	"C": "2.5.4.6", "L": "2.5.4.7", "ST": "2.5.4.8", "S": "2.5.4.8", "STREET": "2.5.4.9",
	"O": "2.5.4.10", "OU": "2.5.4.11", "T": "2.5.4.12", "TITLE": "2.5.4.12",
	"GIVENNAME": "2.5.4.42", "G": "2.5.4.42", "INITIALS": "2.5.4.43",
	"DNQUALIFIER": "2.5.4.46", "ORGANIZATIONIDENTIFIER": "2.5.4.97",
	"DC": "0.9.2342.19200300.100.1.25", "UID": "0.9.2342.19200300.100.1.1",
	"E": "1.2.840.113549.1.9.1", "EMAILADDRESS": "1.2.840.113549.1.9.1",
}

// parseDN splits an RFC 4514 string into its attribute type/value pairs in
// string order (multi-valued RDNs flattened). Values may be quoted or use
// backslash escapes; "#hex" (BER) values are not supported.
func parseDN(s string) ([]dnATV, bool) {
	var out []dnATV
	i := 0
	for {
		for i < len(s) && s[i] == ' ' {
			i++
		}
		if i >= len(s) {
			break
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			return nil, false
		}
		typ := strings.ToUpper(strings.TrimSpace(s[i : i+eq]))
		typ = strings.TrimPrefix(typ, "OID.")
		oid, known := dnAttributeOIDs[typ]
		if !known {
			if !isDottedOID(typ) {
				return nil, false
			}
			oid = typ
		}
		i += eq + 1
		for i < len(s) && s[i] == ' ' {
			i++
		}
		var val strings.Builder
		if i < len(s) && s[i] == '#' {
			return nil, false
		}
		if i < len(s) && s[i] == '"' {
			i++
			for i < len(s) && s[i] != '"' {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
				i++
			}
			if i >= len(s) {
				return nil, false
			}
			i++
			for i < len(s) && s[i] == ' ' {
				i++
			}
		} else {
			for i < len(s) && s[i] != ',' && s[i] != '+' && s[i] != ';' {
				if s[i] == '\\' && i+1 < len(s) {
					if i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
						b, _ := hex.DecodeString(s[i+1 : i+3])
						val.Write(b)
						i += 3
						continue
					}
					i++
				}
				val.WriteByte(s[i])
				i++
			}
		}
		out = append(out, dnATV{oid, normalizeDNValue(val.String())})
		if i < len(s) {
			if c := s[i]; c != ',' && c != '+' && c != ';' {
				return nil, false
			}
			i++
		}
	}
	return out, len(out) > 0
}

func normalizeDNValue(v string) string {
	return strings.ToLower(strings.Join(strings.Fields(v), " "))
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func isDottedOID(s string) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if (s[i] < '0' || s[i] > '9') && s[i] != '.' {
			return false
		}
	}
	return strings.Contains(s, ".")
}

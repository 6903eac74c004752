package endpoint

import (
	"regexp"
	"strings"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/internal/wssec"
	"github.com/edigateway/gateway/internal/xmlenc"
)

// stableReasons are the partner-facing first words of the security
// refusals: the same sentence for every occurrence of a code, whatever
// package found the problem. What follows them (see partnerDetail) is our
// description of the message, never an error text of a Go package.
var stableReasons = map[string]string{
	as4.CodeFailedAuthentication: "the message's signature could not be authenticated",
	as4.CodeFailedDecryption:     "the message could not be decrypted with our keys",
	as4.CodePolicyNoncompliance:  "the message does not meet the security policy agreed with this partner",
	as4.CodeInvalidHeader:        "the message's SOAP or WS-Security header is malformed",
}

// sentinelPrefixes are the texts our security packages put before their
// own description of a problem ("wssec: failed authentication: …",
// "EBMS:0103: xmlenc: unsupported algorithm: …"); they name Go packages
// and say less than the ebMS code, so they are cut.
var sentinelPrefixes = func() []string {
	var out []string
	for _, err := range []error{wssec.ErrFailedAuthentication, wssec.ErrPolicyNoncompliance, wssec.ErrInvalidXML,
		xmlenc.ErrNoKey, xmlenc.ErrDecrypt, xmlenc.ErrMalformed, xmlenc.ErrLimit, xmlenc.ErrUnsupported, xmlenc.ErrPolicy} {
		out = append(out, err.Error()+": ")
	}
	return out
}()

var ebmsCodePrefix = regexp.MustCompile(`^EBMS:[0-9]{4}: `)

// goPackages are names of Go packages (ours and the standard library's)
// whose error texts begin with "name: ".
const goPackages = `as4|wssec|xmlenc|trust|peppol|sbdh|brainpool|cms|smime|limits|exchange|dedup|receipt|keyfile|gcmstream|bufpipe|readahead|x509|asn1|base64|xml|gzip|flate|zlib|mime|multipart|http|tls|rsa|ecdsa|ecdh|ed25519|strconv|json|crypto/[a-z0-9]+|encoding/[a-z0-9]+`

// leadingPackage is a package prefix at the start of a description.
var leadingPackage = regexp.MustCompile(`^(?:` + goPackages + `): `)

// goErrorText finds the start of an error text of a Go package inside a
// description: a package name (or import path) followed by ": ", or the
// wording of encoding/base64, encoding/xml, encoding/asn1 and io.
var goErrorText = regexp.MustCompile(`(?:^|[\s("'])(?:` + goPackages + `|[a-z0-9]+/[a-z0-9/]+): |illegal base64|XML syntax error|unexpected EOF|invalid BER|structure error`)

// partnerDetail is the eb:ErrorDetail of a security refusal with code: our
// own description of the message (internal text without its package
// prefixes, cut where an error text of a Go package begins), the same words
// AS2's negative MDN gives for the same problem; the code's stable reason
// when nothing of ours is left. The stable reason is the eb:Description of
// every such refusal (reject). The full text goes to the log and the audit
// record with the error's cause.
func partnerDetail(code, internal string) string {
	if specific := partnerText(internal); specific != "" {
		return specific
	}
	return stableReasons[code]
}

// stableDescription is the eb:Description of a refusal with code: its
// stable reason as a sentence ("" for codes without one).
func stableDescription(code string) string {
	r := stableReasons[code]
	if r == "" {
		return ""
	}
	return strings.ToUpper(r[:1]) + r[1:] + "."
}

// partnerText removes package prefixes from internal and cuts it where an
// error text of a Go package begins; "" when nothing of ours is left.
func partnerText(internal string) string {
	s := strings.TrimSpace(internal)
	for {
		cut := 0
		for _, p := range sentinelPrefixes {
			if strings.HasPrefix(s, p) {
				cut = len(p)
				break
			}
		}
		for _, re := range []*regexp.Regexp{ebmsCodePrefix, leadingPackage} {
			if loc := re.FindStringIndex(s); cut == 0 && loc != nil {
				cut = loc[1]
			}
		}
		if cut == 0 {
			break
		}
		s = s[cut:]
	}
	if loc := goErrorText.FindStringIndex(s); loc != nil {
		s = s[:loc[0]]
	}
	s = strings.TrimRight(strings.TrimSpace(s), ":;,( ")
	return truncate(s)
}

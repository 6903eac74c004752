package trust

import (
	"crypto/x509"
	"math/big"
	"strings"
)

// Serial is the one form in which the gateway writes a certificate's serial
// number, everywhere an operator or a partner reads it: replies (MDN text,
// eb:Error detail), audit records, log lines, the serial label of
// gateway_certificate_expiry_seconds, `gateway partners list` and
// `partners check`. It is the form `openssl x509 -noout -serial` prints
// after "serial=": upper-case hexadecimal, without colons, in whole bytes
// (a leading 0 added to an odd number of digits; serial 4102 is "1006",
// serial 1 is "01"). A negative serial (not allowed by RFC 5280) is
// written with a leading '-'; a certificate without one as "?".
//
// Protocol fields keep their own encodings: XML Signature's
// ds:X509SerialNumber is decimal, as its schema requires.
func Serial(c *x509.Certificate) string {
	if c == nil {
		return "?"
	}
	return SerialNumber(c.SerialNumber)
}

// SerialNumber is Serial for a serial number on its own (a CRL entry, an
// OCSP request).
func SerialNumber(n *big.Int) string {
	if n == nil {
		return "?"
	}
	s := strings.ToUpper(new(big.Int).Abs(n).Text(16))
	if len(s)%2 == 1 {
		s = "0" + s
	}
	if n.Sign() < 0 {
		s = "-" + s
	}
	return s
}

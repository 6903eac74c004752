package trust_test

import (
	"crypto/x509"
	"math/big"
	"testing"

	"github.com/edigateway/gateway/internal/trust"
)

// Serial writes what `openssl x509 -noout -serial` prints after "serial=".
func TestSerialIsOpenSSLsForm(t *testing.T) {
	for _, tc := range []struct {
		n    *big.Int
		want string
	}{
		{big.NewInt(1), "01"},
		{big.NewInt(0), "00"},
		{big.NewInt(4102), "1006"},
		{big.NewInt(0x0A1B2C), "0A1B2C"},
		{new(big.Int).SetBytes([]byte{0x47, 0xfb, 0xc3, 0x94, 0x33, 0xfa, 0xae, 0x59, 0x00, 0x9d}), "47FBC39433FAAE59009D"},
		{big.NewInt(-255), "-FF"},
		{nil, "?"},
	} {
		if got := trust.SerialNumber(tc.n); got != tc.want {
			t.Errorf("SerialNumber(%v) = %q, want %q", tc.n, got, tc.want)
		}
	}
	if got := trust.Serial(&x509.Certificate{SerialNumber: big.NewInt(4102)}); got != "1006" {
		t.Errorf("Serial = %q", got)
	}
	if got := trust.Serial(nil); got != "?" {
		t.Errorf("Serial(nil) = %q", got)
	}
}

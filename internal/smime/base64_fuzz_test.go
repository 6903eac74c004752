package smime

import (
	"bytes"
	"encoding/base64"
	"testing"
)

// FuzzDecodeBase64Stream: the streaming decoder agrees with decoding the
// cleaned body in one go, whenever it claims success.
func FuzzDecodeBase64Stream(f *testing.F) {
	for _, s := range []string{"", "QUJD", "QUJD\r\nRA==", "QU JD\tRA==\n", "QUJ", "QUJD=", "====", "Q\nU\nJ\nD\n", "QUJDRA", " 000=0000"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := decodeBase64Stream(body)
		clean := bytes.Map(func(r rune) rune {
			switch r {
			case ' ', '\t', '\r', '\n':
				return -1
			}
			return r
		}, body)
		want := make([]byte, base64.StdEncoding.DecodedLen(len(clean)))
		n, err := base64.StdEncoding.Decode(want, clean)
		if !ok {
			return // decodeTransfer falls back to the one-go decoder
		}
		if err != nil || !bytes.Equal(got, want[:n]) {
			t.Fatalf("%q: stream %q, one go %q (%v)", body, got, want[:n], err)
		}
	})
}

func TestDecodeBase64StreamCommonBodies(t *testing.T) {
	for _, s := range []string{"QUJD", "QUJD\r\nRA==\r\n", ""} {
		if _, ok := decodeBase64Stream([]byte(s)); !ok {
			t.Errorf("%q not decoded by the streaming decoder", s)
		}
	}
}

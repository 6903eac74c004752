package base64body

import (
	"bytes"
	"encoding/base64"
	"io"
	"testing"
	"testing/iotest"
)

// FuzzNewDecoder feeds arbitrary part bodies (an AS4 attachment or an AS2
// entity whose Content-Transfer-Encoding is base64) to the decoder, read
// whole, one byte at a time and in reads of three bytes: no panic, never
// more bytes than the text can encode, the same bytes or a refusal each
// way however the body arrives, base64 text after '=' padding refused, and
// where the body with its white space removed is valid base64 the decoder
// gives exactly its bytes.
func FuzzNewDecoder(f *testing.F) {
	for _, s := range []string{"", "QUJD", "QUJD\r\nRA==\r\n", "QU JD\tRA==\n", "QUJ", "QUJD=", "====",
		"Q\nU\nJ\nD\n", "QQ==QUJD", "QQ==\r\nQUJD", "QQ===", "QUJD====", "QUJD\r\n\r\n", "\xff\xfe", "VU5CK1VOT0M6Mysr\r\nQUNNRStHQVRFV0FZJw==\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := io.ReadAll(NewDecoder(bytes.NewReader(body)))
		slow, serr := io.ReadAll(NewDecoder(iotest.OneByteReader(bytes.NewReader(body))))
		three, terr := io.ReadAll(NewDecoder(chunkReader{bytes.NewReader(body), 3}))
		for _, o := range []struct {
			how string
			b   []byte
			err error
		}{{"a byte at a time", slow, serr}, {"three bytes at a time", three, terr}} {
			if (err == nil) != (o.err == nil) || err == nil && !bytes.Equal(got, o.b) {
				t.Fatalf("%q: whole %q (%v), %s %q (%v)", body, got, err, o.how, o.b, o.err)
			}
		}
		if textAfterPadding(body) && err == nil {
			t.Fatalf("%q: text after the padding decoded to %q", body, got)
		}
		if len(got) > base64.StdEncoding.DecodedLen(len(body)) {
			t.Fatalf("%q: %d bytes from %d characters", body, len(got), len(body))
		}
		clean := bytes.Map(func(r rune) rune {
			switch r {
			case ' ', '\t', '\r', '\n':
				return -1
			}
			return r
		}, body)
		want, werr := base64.StdEncoding.DecodeString(string(clean))
		if werr == nil && (err != nil || !bytes.Equal(got, want)) {
			t.Fatalf("%q: decoded %q (%v), want %q", body, got, err, want)
		}
	})
}

// textAfterPadding reports base64 text after an '=' (white space and more
// '=' aside).
func textAfterPadding(b []byte) bool {
	i := bytes.IndexByte(b, '=')
	return i >= 0 && len(bytes.Trim(b[i:], "= \t\r\n")) > 0
}

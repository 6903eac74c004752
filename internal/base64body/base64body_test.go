package base64body

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestNewDecoderSkipsWhiteSpace(t *testing.T) {
	data := bytes.Repeat([]byte("EDI payload \x00\xff"), 100)
	enc := base64.StdEncoding.EncodeToString(data)
	var spaced strings.Builder
	for i := 0; i < len(enc); i += 76 {
		spaced.WriteString(enc[i:min(i+76, len(enc))])
		spaced.WriteString(" \t\r\n")
	}
	got, err := io.ReadAll(NewDecoder(strings.NewReader(spaced.String())))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("decoded %d bytes, err %v; want %d bytes", len(got), err, len(data))
	}
	if _, err := io.ReadAll(NewDecoder(strings.NewReader("not*base64"))); err == nil {
		t.Fatal("corrupt input decoded without an error")
	}
}

// chunkReader returns at most n bytes per Read, as a connection may.
type chunkReader struct {
	r io.Reader
	n int
}

func (c chunkReader) Read(p []byte) (int, error) {
	return c.r.Read(p[:min(len(p), c.n)])
}

// decodeChunked decodes body arriving in reads of at most n bytes (0:
// whole), read out by the caller in reads of at most out bytes (0: as
// io.ReadAll does).
func decodeChunked(body string, n, out int) ([]byte, error) {
	var r io.Reader = strings.NewReader(body)
	if n > 0 {
		r = chunkReader{r, n}
	}
	dec := NewDecoder(r)
	if out > 0 {
		dec = chunkReader{dec, out}
	}
	return io.ReadAll(dec)
}

// TestNewDecoderSameVerdictHoweverBodyArrives: text after '=' padding
// (two base64 blocks one after the other, white space between, '=' runs,
// trailing garbage) is refused, and everything else decoded, the same for
// every split of the body into reads. Before the fix "QQ==QUJD" read whole
// was refused but read a byte at a time decoded to "AABC".
func TestNewDecoderSameVerdictHoweverBodyArrives(t *testing.T) {
	long := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("UNB+UNOC:3'"), 200))
	cases := []struct {
		body string
		want string // "" with fail
		fail bool
	}{
		{body: "QUJD\r\nQQ==\r\n", want: "ABCA"},
		{body: "QUI=", want: "AB"},
		{body: "QQ==\r\n\r\n \t", want: "A"},
		{body: long + "\r\n", want: strings.Repeat("UNB+UNOC:3'", 200)},
		{body: "QQ==QUJD", fail: true},
		{body: "QUI=QUJD", fail: true},
		{body: "QQ==\r\nQUJD\r\n", fail: true},
		{body: "QQ== QUJD", fail: true},
		{body: "QQ=\r\n=QUJD", fail: true},
		{body: long[:len(long)-4] + "QQ==" + long, fail: true},
		{body: "QQ==" + strings.Repeat(" ", 2000) + "Q", fail: true},
		{body: "QQ===", fail: true},
		{body: "QQ====", fail: true},
		{body: "QUJD====", fail: true},
		{body: "====", fail: true},
		{body: "QQ=A", fail: true},
		{body: "QUJD!", fail: true},
		{body: "QQ==!", fail: true},
		{body: "QQ==x\r\n", fail: true},
	}
	for _, tc := range cases {
		for _, n := range []int{0, 1, 2, 3, 5, 7} {
			for _, out := range []int{0, 1, 3} {
				got, err := decodeChunked(tc.body, n, out)
				if tc.fail {
					if err == nil {
						t.Errorf("%.40q in reads of %d, out %d: decoded %q, want a refusal", tc.body, n, out, got)
					}
					continue
				}
				if err != nil || string(got) != tc.want {
					t.Errorf("%.40q in reads of %d, out %d: %.40q (%v), want %.40q", tc.body, n, out, got, err, tc.want)
				}
			}
		}
	}
}

// TestNewDecoderTextAfterPaddingIsCorruptInput: the refusal is a
// base64.CorruptInputError (as4 reports those as bad base64, not as a
// failed read) at the first character after the padding.
func TestNewDecoderTextAfterPaddingIsCorruptInput(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 5} {
		_, err := decodeChunked("QQ==\r\nQUJD", n, 0)
		var ce base64.CorruptInputError
		if !errors.As(err, &ce) || ce != 6 {
			t.Errorf("reads of %d: %v, want illegal base64 data at input byte 6", n, err)
		}
	}
}

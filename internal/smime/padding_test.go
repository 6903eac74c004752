package smime

import (
	"bytes"
	"encoding/base64"
	"io"
	"os"
	"strings"
	"testing"
)

// TestBase64TextAfterPaddingSameVerdictStreamedAndInMemory: a base64 body
// whose text goes on after '=' padding is refused by the in-memory decoder
// (decodeTransfer) and by the streamed one (decodeBase64ToFile, which
// reads its file in 1024-byte pieces: the padding at the end of one, the
// text in the next) alike, and a well-formed body decodes to the same
// bytes on both paths.
func TestBase64TextAfterPaddingSameVerdictStreamedAndInMemory(t *testing.T) {
	data := bytes.Repeat([]byte("UNB+UNOC:3'"), 70)[:765] // 1020 characters of base64
	block := base64.StdEncoding.EncodeToString(data)
	cases := []struct {
		body string
		ok   bool
	}{
		{block + "QQ==", true},
		{block + "\r\nQQ==\r\n", true},
		{"QQ==QUJD", false},
		{"QQ==\r\nQUJD\r\n", false},
		{block + "QQ==" + "QUJD", false}, // padding ends a 1024-byte read
		{block + "QUI=" + "\r\n" + block, false},
		{block[:1018] + "==\r\n" + block, false},
	}
	dir := t.TempDir()
	opts := StreamOptions{NewFile: func() (*os.File, error) { return os.CreateTemp(dir, "layer-*") }}
	for _, tc := range cases {
		mem, merr := decodeTransfer("base64", []byte(tc.body))
		s, serr := decodeBase64ToFile(Section{R: strings.NewReader(tc.body), N: int64(len(tc.body))}, opts)
		var streamed []byte
		if serr == nil {
			var err error
			if streamed, err = io.ReadAll(s.Reader()); err != nil {
				t.Fatal(err)
			}
		}
		if (merr == nil) != tc.ok || (serr == nil) != tc.ok {
			t.Errorf("%.30q…: in memory %v, streamed %v; want accepted %v", tc.body, merr, serr, tc.ok)
			continue
		}
		if tc.ok && !bytes.Equal(mem, streamed) {
			t.Errorf("%.30q…: in memory %d bytes, streamed %d bytes", tc.body, len(mem), len(streamed))
		}
	}
}

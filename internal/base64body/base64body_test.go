package base64body

import (
	"bytes"
	"encoding/base64"
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

package cms

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func unhex(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(err)
	}
	return b
}

func TestBERToDER(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"der unchanged", "30 06 02 01 01 04 01 aa", "30 06 02 01 01 04 01 aa"},
		{"indefinite sequence", "30 80 02 01 01 00 00", "30 03 02 01 01"},
		{"nested indefinite", "30 80 30 80 04 01 aa 00 00 02 01 05 00 00", "30 08 30 03 04 01 aa 02 01 05"},
		{"constructed octet string", "24 80 04 02 aa bb 04 01 cc 00 00", "04 03 aa bb cc"},
		{"constructed octet string definite", "24 07 04 02 aa bb 04 01 cc", "04 03 aa bb cc"},
		{"nested constructed octet string", "24 80 24 80 04 01 01 00 00 04 01 02 00 00", "04 02 01 02"},
		{"constructed bit string", "23 80 03 02 00 aa 03 02 04 b0 00 00", "03 03 04 aa b0"},
		{"context constructed kept", "a0 80 04 02 aa bb 04 01 cc 00 00", "a0 07 04 02 aa bb 04 01 cc"},
		{"non-minimal length", "04 81 02 aa bb", "04 02 aa bb"},
		{"non-minimal long length", "04 82 00 02 aa bb", "04 02 aa bb"},
		{"empty indefinite", "30 80 00 00", "30 00"},
		{"high tag number", "bf 81 00 80 02 01 07 00 00", "bf 81 00 03 02 01 07"},
	}
	for _, c := range cases {
		in := unhex(c.in)
		got, n, err := berToDER(in)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !bytes.Equal(got, unhex(c.want)) || n != len(in) {
			t.Errorf("%s: got % x (consumed %d), want %s", c.name, got, n, c.want)
		}
	}

	// Long content gets a long-form length.
	long := append([]byte{0x24, 0x80, 0x04, 0x81, 200}, make([]byte, 200)...)
	long = append(long, 0x04, 0x01, 0x01, 0x00, 0x00)
	got, _, err := berToDER(long)
	if err != nil || !bytes.HasPrefix(got, []byte{0x04, 0x81, 201}) || len(got) != 204 {
		t.Fatalf("long: % x..., %v", got[:4], err)
	}

	// Already-DER input is returned without copying.
	der := unhex("30 06 02 01 01 04 01 aa ff ff")
	got, n, _ := berToDER(der)
	if n != 8 || &got[0] != &der[0] {
		t.Fatal("DER input was copied or consumed wrongly")
	}
}

func TestBERToDERErrors(t *testing.T) {
	for name, in := range map[string]string{
		"empty":                   "",
		"one byte":                "30",
		"truncated content":       "04 05 aa",
		"indefinite primitive":    "04 80 aa 00 00",
		"missing eoc":             "30 80 02 01 01",
		"child overruns":          "30 03 02 05 01",
		"length too long":         "04 89 01 01 01 01 01 01 01 01 01",
		"reserved length":         "04 ff",
		"mixed string segments":   "24 80 02 01 01 00 00",
		"bitstring middle unused": "23 80 03 02 04 aa 03 02 00 b0 00 00",
		"huge tag number":         "1f ff ff ff ff 7f 00",
	} {
		if _, _, err := berToDER(unhex(in)); !errors.Is(err, errBER) {
			t.Errorf("%s: want errBER, got %v", name, err)
		}
	}
	deep := bytes.Repeat([]byte{0x30, 0x80}, maxBERDepth+2)
	deep = append(deep, bytes.Repeat([]byte{0, 0}, maxBERDepth+2)...)
	if _, _, err := berToDER(deep); !errors.Is(err, errBER) {
		t.Fatalf("deep nesting: want errBER, got %v", err)
	}
	ok := bytes.Repeat([]byte{0x30, 0x80}, 10)
	ok = append(ok, bytes.Repeat([]byte{0, 0}, 10)...)
	if _, _, err := berToDER(ok); err != nil {
		t.Fatalf("10 levels: %v", err)
	}
}

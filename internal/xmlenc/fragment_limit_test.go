package xmlenc

import (
	"bytes"
	"errors"
	"testing"

	"github.com/beevik/etree"
)

// TestParseFragmentElementLimit: decrypted XML is parsed before the
// signature is checked (and anybody can encrypt to our public key), and a
// parsed element costs about 140 bytes of heap; 16 MiB of "<a/>" must not
// become half a gigabyte.
func TestParseFragmentElementLimit(t *testing.T) {
	parent := etree.NewElement("Body")
	ok := bytes.Repeat([]byte("<a/>"), maxFragmentElements)
	if _, err := parseFragment(parent, ok, 16<<20, 256); err != nil {
		t.Fatalf("%d elements: %v", maxFragmentElements, err)
	}
	_, err := parseFragment(parent, append(ok, "<a/>"...), 16<<20, 256)
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("%d elements: %v, want ErrLimit", maxFragmentElements+1, err)
	}
}

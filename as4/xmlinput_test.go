package as4

import (
	"errors"
	"testing"
)

// TestParseXMLByteOrderMark: XML 1.0 §4.3.3 allows a UTF-8 entity to start
// with the byte order mark, and .NET writers emit one by default.
func TestParseXMLByteOrderMark(t *testing.T) {
	for _, in := range []string{
		"\xef\xbb\xbf<?xml version=\"1.0\" encoding=\"utf-8\"?><a/>",
		"\xef\xbb\xbf<a/>",
	} {
		doc, err := ParseXML([]byte(in), 0)
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if doc.Root().Tag != "a" {
			t.Fatalf("%q: root %q", in, doc.Root().Tag)
		}
	}
	if _, err := ParseXML([]byte("\xef\xbb\xbf\xef\xbb\xbf<a/>"), 0); err == nil {
		t.Fatal("two byte order marks accepted")
	}
}

// TestParseXMLAttributeWhitespace: literal line breaks and tabs in attribute
// values become spaces (XML 1.0 §3.3.3); character references do not.
func TestParseXMLAttributeWhitespace(t *testing.T) {
	doc, err := ParseXML([]byte("<a b=\"x\r\ny\tz\" c=\"&#10;\"/>"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := doc.Root().SelectAttrValue("b", ""); got != "x y z" {
		t.Errorf("b = %q", got)
	}
	if got := doc.Root().SelectAttrValue("c", ""); got != "\n" {
		t.Errorf("c = %q", got)
	}
}

// TestParseXMLElementLimit: parsed XML costs about 140 bytes of heap per
// element, so a 100 MB body of "<a/>" would take gigabytes before any
// signature is checked; the element count is bounded.
func TestParseXMLElementLimit(t *testing.T) {
	doc := func(n int) []byte {
		b := []byte("<r>")
		for i := 1; i < n; i++ {
			b = append(b, "<a/>"...)
		}
		return append(b, "</r>"...)
	}
	if _, err := ParseXML(doc(MaxXMLElements), 0); err != nil {
		t.Fatalf("%d elements: %v", MaxXMLElements, err)
	}
	_, err := ParseXML(doc(MaxXMLElements+1), 0)
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("%d elements: %v, want ErrLimit", MaxXMLElements+1, err)
	}
	var ae *Error
	if !errors.As(err, &ae) || ae.Code != CodeInvalidHeader {
		t.Fatalf("error %v is not EBMS:0009", err)
	}
}

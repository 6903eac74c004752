package endpoint

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestTruncateKeepsUTF8: error details go into the eb:ErrorDetail of a
// signed signal; cutting a multi-byte character in half would make the
// whole signal invalid XML for the partner.
func TestTruncateKeepsUTF8(t *testing.T) {
	for _, s := range []string{"a" + strings.Repeat("é", 300), "ab" + strings.Repeat("€", 200)} {
		got := truncate(s)
		if !utf8.ValidString(got) {
			t.Fatalf("truncate(%d bytes) = invalid UTF-8 ending %q", len(s), got[len(got)-8:])
		}
		if !strings.HasSuffix(got, "…") || len(got) > 400+len("…") || len(got) < 400-3 {
			t.Errorf("truncate gave %d bytes", len(got))
		}
	}
	if got := truncate("short"); got != "short" {
		t.Errorf("truncate(short) = %q", got)
	}
}

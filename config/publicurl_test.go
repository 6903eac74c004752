package config

import (
	"strings"
	"testing"
)

// TestPublicURL: public_url is optional (empty by default), and when set
// must be an http(s) base URL.
func TestPublicURL(t *testing.T) {
	c, err := Load(write(t, "store: memory\n"))
	if err != nil || c.PublicURL != "" {
		t.Fatalf("default: %v %q", err, c.PublicURL)
	}
	c, err = Load(write(t, "store: memory\npublic_url: https://edi.example.com/gw\n"))
	if err != nil || c.PublicURL != "https://edi.example.com/gw" {
		t.Fatalf("set: %v %+v", err, c)
	}
	for _, bad := range []string{"edi.example.com", "ftp://edi.example.com", "https://edi.example.com/?x=1", "https://user:pw@edi.example.com"} {
		if _, err := Load(write(t, "store: memory\npublic_url: "+bad+"\n")); err == nil || !strings.Contains(err.Error(), "public_url") {
			t.Errorf("public_url %s: %v", bad, err)
		}
	}
}

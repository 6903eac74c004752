package partners

import (
	"net/netip"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestURLPatternMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, url string
		want         bool
	}{
		{"https://as2.acme.example/mdn", "https://as2.acme.example/mdn", true},
		{"https://as2.acme.example/mdn", "HTTPS://AS2.Acme.Example/mdn", true},
		{"https://as2.acme.example/mdn", "https://as2.acme.example./mdn", true},
		{"https://as2.acme.example/mdn", "https://as2.acme.example:443/mdn", true},
		{"https://as2.acme.example:443/mdn", "https://as2.acme.example/mdn", true},
		{"https://as2.acme.example/mdn", "https://as2.acme.example/mdn?x=1", true}, // the query is not matched
		{"https://as2.acme.example/mdn", "http://as2.acme.example/mdn", false},
		{"https://as2.acme.example/mdn", "https://as2.acme.example:8443/mdn", false},
		{"https://as2.acme.example/mdn", "https://as2.acme.example:/mdn", false},
		{"https://as2.acme.example/mdn", "https://as2.acme.example/MDN", false},
		{"https://as2.acme.example/mdn", "https://as2.acme.example/mdn/", false},
		{"https://as2.acme.example/mdn", "https://evil.example/mdn", false},
		{"https://as2.acme.example/mdn", "https://as2.acme.example.evil.example/mdn", false},
		{"https://as2.acme.example/mdn", "https://user:pw@as2.acme.example/mdn", false},
		{"https://as2.acme.example/mdn", "https://as2%2eacme.example/mdn", false},
		{"http://as2.acme.example", "http://as2.acme.example", true},
		{"http://as2.acme.example", "http://as2.acme.example/", true},
		{"http://as2.acme.example", "http://as2.acme.example/x", false},
		{"http://as2.acme.example", "http://as2.acme.example:80", true},
		{"http://as2.acme.example:8080/", "http://as2.acme.example/", false},
		// wildcard: exactly one label
		{"https://*.acme.example:8443/as2/*", "https://mdn.acme.example:8443/as2/receipt", true},
		{"https://*.acme.example:8443/as2/*", "https://mdn.acme.example:8443/as2/", true},
		{"https://*.acme.example:8443/as2/*", "https://acme.example:8443/as2/receipt", false},
		{"https://*.acme.example:8443/as2/*", "https://a.b.acme.example:8443/as2/receipt", false},
		{"https://*.acme.example:8443/as2/*", "https://mdn.acme.example/as2/receipt", false},
		{"https://*.acme.example:8443/as2/*", "https://mdn.acme.example:8443/as2/a/b", false},
		{"https://*.acme.example:8443/as2/*", "https://mdn.acme.example:8443/as2", false},
		{"https://*.acme.example:8443/as2/*", "https://mdn.acme.example:8443/as2/..", false},
		{"https://*.acme.example:8443/as2/*", "https://mdn.acme.example:8443/as2/%2e%2e", false},
		{"https://*.acme.example:8443/as2/*", "https://mdnacme.example:8443/as2/x", false},
		{"https://*.acme.example:8443/as2/*", "https://127.0.0.1:8443/as2/x", false},
		{"http://as2.acme.example/*/mdn", "http://as2.acme.example/p1/mdn", true},
		{"http://as2.acme.example/*/mdn", "http://as2.acme.example/p1/p2/mdn", false},
		{"http://as2.acme.example/a*b*c", "http://as2.acme.example/aXbYbZc", true},
		{"http://as2.acme.example/a*b*c", "http://as2.acme.example/aXbY/c", false},
		// IP literals
		{"http://127.0.0.1:8080/mdn", "http://127.0.0.1:8080/mdn", true},
		{"http://127.0.0.1:8080/mdn", "http://[::ffff:127.0.0.1]:8080/mdn", true},
		{"http://127.0.0.1:8080/mdn", "http://127.0.0.2:8080/mdn", false},
		{"http://127.0.0.1:8080/mdn", "http://localhost:8080/mdn", false},
		{"http://127.0.0.1:8080/mdn", "http://127.1:8080/mdn", false},
		{"http://127.0.0.1:8080/mdn", "http://2130706433:8080/mdn", false},
		{"http://[::1]:8080/mdn", "http://[::1]:8080/mdn", true},
		{"http://[::1]:8080/mdn", "http://[0:0::1]:8080/mdn", true},
		{"http://[::1]:8080/mdn", "http://[::1%25lo]:8080/mdn", false},
		{"http://[::ffff:10.0.0.1]/mdn", "http://10.0.0.1/mdn", true},
	} {
		p, err := ParseURLPattern(c.pattern)
		if err != nil {
			t.Fatalf("ParseURLPattern(%q): %v", c.pattern, err)
		}
		u, err := url.Parse(c.url)
		if err != nil {
			if c.want {
				t.Fatalf("url.Parse(%q): %v", c.url, err)
			}
			continue
		}
		if got := p.Match(u); got != c.want {
			t.Errorf("%q matching %q = %v, want %v", c.pattern, c.url, got, c.want)
		}
	}
}

func TestURLPatternRefused(t *testing.T) {
	for _, s := range []string{
		"", "as2.acme.example/mdn", "ftp://as2.acme.example/", "https://", "https:///mdn",
		"https://user@as2.acme.example/", "https://as2.acme.example/mdn?x=1", "https://as2.acme.example/mdn#f",
		"https://as2.acme.example:0/", "https://as2.acme.example:65536/", "https://as2.acme.example:/", "https://as2.acme.example:+1/",
		"https://as2.acme.example:*/", "https://*.example/", "https://*/", "https://a*.acme.example/", "https://as2.*.example/",
		"https://**.acme.example/", "https://as2.acme.example/**", "https://as2 .acme.example/", "https://as2.acme.example/a b",
		"https://-as2.acme.example/", "https://as2_x.acme.example/", "https://bücher.example/", "https://127.1/",
		"https://1.2.3.4.5/", "https://[::1/", "https://[::1]x/", "https://[fe80::1%25eth0]/", "https://[127.0.0.1]/",
		"https://as2%2eacme.example/", "https://" + strings.Repeat("a", 64) + ".example/",
	} {
		if p, err := ParseURLPattern(s); err == nil {
			t.Errorf("ParseURLPattern(%q) = %+v, want an error", s, p)
		}
	}
}

func TestAsyncMDNPatternsValidatedAtLoad(t *testing.T) {
	for _, c := range []struct{ yaml, field string }{
		{"  async_mdn_urls: [\"https://as2.acme.example/mdn\", \"gopher://x/\"]\n", "as2.async_mdn_urls[1]"},
		{"  async_mdn_urls: [\"https://*.com/\"]\n", "as2.async_mdn_urls[0]"},
		{"  async_mdn_private_networks: [10.0.0.0/8]\n", "as2.async_mdn_private_networks"},
		{"  async_mdn_urls: [\"https://as2.acme.example/\"]\n  async_mdn_private_networks: [10.0.0.1/8]\n", "as2.async_mdn_private_networks[0]"},
		{"  async_mdn_urls: [\"https://as2.acme.example/\"]\n  async_mdn_private_networks: [10.0.0.0/8, intranet]\n", "as2.async_mdn_private_networks[1]"},
	} {
		dir := t.TempDir()
		writeCert(t, dir, "acme.pem")
		writeFile(t, dir, "acme.yaml", "id: acme\nas2:\n  as2_id: ACME\n  certificates: [acme.pem]\n"+c.yaml)
		_, err := Load(dir)
		want := filepath.Join(dir, "acme.yaml") + ": " + c.field + ": "
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one naming %q", c.yaml, err, want)
		}
	}
	dir := t.TempDir()
	writeCert(t, dir, "acme.pem")
	writeFile(t, dir, "acme.yaml", "id: acme\nas2:\n  as2_id: ACME\n  certificates: [acme.pem]\n"+
		"  async_mdn_urls: [\"https://as2.acme.example/mdn\", \"https://*.acme.example:8443/as2/*\"]\n"+
		"  async_mdn_private_networks: [10.20.0.0/16, \"fd00::1\"]\n")
	d, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	a := d.Partners[0].AS2
	u, _ := url.Parse("https://mdn.acme.example:8443/as2/r")
	pol := a.AsyncMDN(u)
	if !pol.Listed || !pol.Allowed() || pol.Pattern.Raw != "https://*.acme.example:8443/as2/*" ||
		len(pol.Private) != 2 || pol.Private[0] != netip.MustParsePrefix("10.20.0.0/16") || pol.Private[1] != netip.MustParsePrefix("fd00::1/128") {
		t.Fatalf("policy %+v", pol)
	}
	u, _ = url.Parse("https://other.example/mdn")
	if pol := a.AsyncMDN(u); !pol.Listed || pol.Allowed() {
		t.Fatalf("unlisted URL: %+v", pol)
	}
	if pol := (&AS2{}).AsyncMDN(u); pol.Listed || !pol.Allowed() || pol.Private != nil {
		t.Fatalf("no list: %+v", pol)
	}
}

// FuzzURLPattern parses partner-file patterns and matches them against
// URLs: no panics, matches obey scheme, port and host, and the path glob
// agrees with a regular-expression reading of the documented syntax.
func FuzzURLPattern(f *testing.F) {
	for _, s := range [][2]string{
		{"https://as2.acme.example/mdn", "https://as2.acme.example/mdn"},
		{"https://*.acme.example:8443/as2/*", "https://x.acme.example:8443/as2/y"},
		{"http://127.0.0.1:8080/mdn", "http://[::ffff:127.0.0.1]:8080/mdn"},
		{"http://[::1]/a*b*c", "http://[::1]/aXbYc"},
		{"http://h.example/*/*", "http://h.example/a/"},
		{"https://*.a.example/", "https://a.b.a.example/"},
		{"http://x.example/%2F*", "http://x.example/%2Fa%2F"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, raw string) {
		p, err := ParseURLPattern(pattern)
		if err != nil {
			return
		}
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		if !p.Match(u) {
			return
		}
		if strings.ToLower(u.Scheme) != p.Scheme || u.User != nil {
			t.Fatalf("%q matched %q with another scheme or user information", pattern, raw)
		}
		port := defaultPort(p.Scheme)
		if u.Port() != "" {
			port, _ = parsePort(u.Port())
		}
		if port != p.Port {
			t.Fatalf("%q matched %q on port %d", pattern, raw, port)
		}
		host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
		switch {
		case p.Addr.IsValid():
			if a, err := netip.ParseAddr(host); err != nil || a.Unmap() != p.Addr {
				t.Fatalf("%q matched %q with host %q", pattern, raw, host)
			}
		case p.Wildcard:
			if !strings.HasSuffix(host, "."+p.Host) || strings.Count(host, ".") != strings.Count(p.Host, ".")+1 {
				t.Fatalf("%q matched %q with host %q", pattern, raw, host)
			}
		default:
			if host != p.Host {
				t.Fatalf("%q matched %q with host %q", pattern, raw, host)
			}
		}
		path := u.EscapedPath()
		if path == "" {
			path = "/"
		}
		re := "^" + strings.ReplaceAll(regexp.QuoteMeta(p.Path), `\*`, `[^/]*`) + "$"
		if !regexp.MustCompile(re).MatchString(path) {
			t.Fatalf("%q matched path %q, which %s does not", pattern, path, re)
		}
	})
}

func FuzzGlobMatch(f *testing.F) {
	f.Add("/as2/*", "/as2/mdn")
	f.Add("/*b*/c", "/ab/xb/c")
	f.Add("/a*b*c", "/aXbY/c")
	f.Fuzz(func(t *testing.T, pattern, s string) {
		if len(pattern) > 64 || len(s) > 256 || !ascii(pattern) || !ascii(s) {
			return // patterns are ASCII; the regexp oracle reads runes
		}
		re := "^" + strings.ReplaceAll(regexp.QuoteMeta(pattern), `\*`, `[^/]*`) + "$"
		if got, want := globMatch(pattern, s), regexp.MustCompile(re).MatchString(s); got != want {
			t.Fatalf("globMatch(%q, %q) = %v, regexp %s says %v", pattern, s, got, re, want)
		}
	})
}

func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

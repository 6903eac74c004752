package xmlenc

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"strings"
	"testing"
)

// escapeDNValue writes v as an RFC 4514 attribute value: every byte but
// letters and digits behind a backslash.
func escapeDNValue(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('\\')
		b.WriteByte(c)
	}
	return b.String()
}

// FuzzParseDN feeds arbitrary X509IssuerName strings (a partner's
// EncryptedKey KeyInfo) to parseDN and sameDN: no panic, a parsed name has
// "TYPE=value" entries, and a value written escaped or quoted reads back as
// itself (normalised).
func FuzzParseDN(f *testing.F) {
	for _, s := range []string{"CN=Fuzz CA,O=EDI Gateway,C=DE", "cn=fuzz ca, o=edi gateway; c=de", "C=DE+O=EDI,CN=Fuzz CA",
		`CN="Fuzz, CA",O=EDI`, `CN=Fuzz\2C CA`, "OID.2.5.4.3=Fuzz CA", "2.5.4.3=#0c0746757a7a204341", "CN=#zz", "CN=", "=x",
		"CN=a\\", `CN="open`, "CN=a,,O=b", "1.2=x"} {
		f.Add(s, "Fuzz CA")
	}
	f.Add("CN=x", "a,b+c;d\"e\\f<g>h=i#j")
	f.Add("CN=x", "  leading and trailing  ")
	f.Add("CN=x", "\\41 not hex: \\zz \xff\xfe")
	name := pkix.Name{CommonName: "Fuzz CA", Organization: []string{"EDI Gateway"}, Country: []string{"DE"}}
	cert := &x509.Certificate{Issuer: pkix.Name{Names: name.ToRDNSequence()[0]}}
	for _, rdn := range name.ToRDNSequence()[1:] {
		cert.Issuer.Names = append(cert.Issuer.Names, rdn...)
	}
	f.Fuzz(func(t *testing.T, dn, value string) {
		got, ok := parseDN(dn)
		if ok && len(got) == 0 {
			t.Fatalf("%q: parsed to no attribute", dn)
		}
		for _, e := range got {
			if typ, _, found := strings.Cut(e, "="); !found || typ == "" {
				t.Fatalf("%q: entry %q without a type", dn, e)
			}
		}
		if sameDN(dn, cert) && !ok {
			t.Fatalf("%q matches without parsing", dn)
		}
		want := dnTypeName("CN") + "=" + normValue(value)
		for _, s := range []string{"CN=" + escapeDNValue(value), `CN="` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(value) + `"`} {
			if len(s) > 4096 {
				continue
			}
			got, ok := parseDN(s)
			if !ok || len(got) != 1 || got[0] != want {
				t.Fatalf("%q: parsed %q, %v; want %q", s, got, ok, want)
			}
		}
	})
}

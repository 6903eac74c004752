package partners

import (
	"crypto/x509"
	"fmt"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/certs"
)

// eachSendCertificate calls fn for the certificates a section's send block
// names that the section's certificates do not hold already: the
// partner's encryption certificate (use "as2-send" or "as4-send", read
// with the section's certificate password) and our TLS client certificate
// (use "as2-tls-client" or "as4-tls-client"), so that the certificate
// checks (expiry warnings, the expiry metric, the console) cover every
// certificate a message is encrypted for or sent with. A file that no
// longer reads is skipped (the directory was loaded with it; a reload
// reports it).
func (d *Directory) eachSendCertificate(p *Partner, use string, encFile string, tls SendTLS, allowWeak bool,
	fn func(partner, use, file, field string, cert *x509.Certificate, allowWeakKeys bool)) {
	var held []*x509.Certificate
	if use == "as2" {
		held = d.AS2Certificates(p)
	} else {
		held = d.AS4Certificates(p)
	}
	emit := func(kind, name, field string, pw config.Password) {
		if name == "" {
			return
		}
		path := d.SendFile(name)
		found, err := certs.Certificates(path, pw)
		if err != nil || len(found) == 0 {
			return
		}
		for _, h := range held {
			if h.Equal(found[0]) {
				return // listed with the section's certificates
			}
		}
		fn(p.ID, kind, path, fmt.Sprintf("%s %s.send.%s", p.File, use, field), found[0], allowWeak)
	}
	emit(use+"-send", encFile, "encryption_certificate", d.CertificatePassword(p, use))
	emit(use+"-tls-client", tls.ClientCertificate, "tls.client_certificate", config.Password{})
}

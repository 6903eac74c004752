package server

import (
	"fmt"
	"path/filepath"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/certs"
	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/partners"
)

// trustCerts lists the CA certificates of trust: ca agreements and the
// Peppol AP CA, so that reload_on_change watches their files and the
// certificate metrics show their expiry (use "as2-ca", "as4-ca",
// "peppol-ca").
func trustCerts(d *partners.Directory, pc config.Peppol) []certs.Cert {
	var out []certs.Cert
	add := func(owner, partner, use, config, path string) {
		found, err := partners.ReadCertificates(path)
		if err != nil {
			return // changed since loaded; the next reload reports it
		}
		for _, c := range found {
			out = append(out, certs.Cert{Owner: owner, Partner: partner, Use: use, File: path, Config: config, Cert: c})
		}
	}
	for _, p := range d.Partners {
		for _, s := range []struct {
			use string
			t   *partners.Trust
		}{{"as2", trustOf(p.AS2)}, {"as4", trustOf4(p.AS4)}} {
			if s.t == nil || !s.t.CA() {
				continue
			}
			for _, l := range []struct {
				field string
				files []string
			}{{"ca_certificates", s.t.CACertificates}, {"intermediates", s.t.Intermediates}} {
				field := l.field
				for i, f := range l.files {
					if !filepath.IsAbs(f) {
						f = filepath.Join(d.Dir, f)
					}
					add("partner "+p.ID, p.ID, s.use+"-ca", fmt.Sprintf("%s %s.%s[%d]", p.File, s.use, field, i), f)
				}
			}
		}
	}
	if pc.Enabled {
		for i, f := range pc.APCA {
			add("peppol", "", "peppol-ca", fmt.Sprintf("peppol.ap_ca[%d]", i), f)
		}
	}
	return out
}

func trustOf(a *partners.AS2) *partners.Trust {
	if a == nil {
		return nil
	}
	return &a.Trust
}

func trustOf4(a *partners.AS4) *partners.Trust {
	if a == nil {
		return nil
	}
	return &a.Trust
}

// sameTrust reports whether two CA trust policies have the same
// certificates (the rest of the agreement is compared with the partner).
func sameTrust(a, b *trust.CAPolicy) bool {
	if a == nil || b == nil {
		return a == b
	}
	return sameCertList(a.Roots, b.Roots) && sameCertList(a.Intermediates, b.Intermediates)
}

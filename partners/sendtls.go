package partners

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/certs"
	"github.com/edigateway/gateway/outbound"
)

// SendTLSConfig is the TLS client configuration of our connections to p's
// proto endpoint, from its send.tls block: the roots of ca_file (else the
// system's), the pinned certificate (the server must present exactly it;
// without ca_file it replaces the chain and name checks, as a pin of a
// self-signed certificate needs), our client certificate, TLS 1.2 at
// least. The files are read now, so that a renewed file is taken at the
// next call.
func (d *Directory) SendTLSConfig(p *Partner, proto outbound.Protocol) (*tls.Config, error) {
	var t SendTLS
	switch {
	case proto == outbound.AS2 && p.AS2 != nil && p.AS2.Send != nil:
		t = p.AS2.Send.TLS
	case proto == outbound.AS4 && p.AS4 != nil && p.AS4.Send != nil:
		t = p.AS4.Send.TLS
	default:
		return nil, fmt.Errorf("partners: %s does not send %s", p.ID, proto)
	}
	field := fmt.Sprintf("%s %s.send.tls", p.File, proto)
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		roots, err := certs.Certificates(d.SendFile(t.CAFile), config.Password{})
		if err != nil {
			return nil, fmt.Errorf("partners: %s.ca_file: %w", field, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		for _, c := range roots {
			cfg.RootCAs.AddCert(c)
		}
	}
	if t.PinnedCertificate != "" {
		pinned, err := certs.Certificates(d.SendFile(t.PinnedCertificate), config.Password{})
		if err != nil {
			return nil, fmt.Errorf("partners: %s.pinned_certificate: %w", field, err)
		}
		// Without ca_file the pin is the whole check (the chain and the
		// name are not); VerifyConnection runs either way.
		cfg.InsecureSkipVerify = t.CAFile == ""
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("partners: the server presented no certificate")
			}
			for _, c := range pinned {
				if cs.PeerCertificates[0].Equal(c) {
					return nil
				}
			}
			return fmt.Errorf("partners: the server's certificate %q is not the one %s.pinned_certificate names", cs.PeerCertificates[0].Subject, field)
		}
	}
	if t.ClientCertificate != "" {
		leaf, key, err := certs.KeyPair(d.SendFile(t.ClientCertificate), d.SendFile(t.ClientKey), config.Password{})
		if err != nil {
			return nil, fmt.Errorf("partners: %s.client_certificate: %w", field, err)
		}
		cfg.Certificates = []tls.Certificate{{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}}
	}
	return cfg, nil
}

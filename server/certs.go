package server

import (
	"context"
	"time"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/certs"
	"github.com/edigateway/gateway/partners"
)

// certCheckInterval is how often serve repeats the certificate checks.
const certCheckInterval = 24 * time.Hour

// logCertificates judges the partner certificates of d and our identity
// keys' certificates (certcheck) and logs each finding: errors (expired,
// key not matching its certificate) at ERROR, warnings (expiring within
// cert_warning, not yet valid, RSA below 2048 bits) at WARN.
func (s *Server) logCertificates(d *partners.Directory, keys []config.KeyPair, warnAhead time.Duration) []certs.Finding {
	_, fs := certs.All(d, keys, time.Now(), warnAhead)
	for _, f := range fs {
		attrs := []any{"owner", f.Cert.Owner, "config", f.Cert.Config, "file", f.Cert.File, "problem", f.Msg}
		if f.KeyFile != "" {
			attrs = append(attrs, "key_file", f.KeyFile)
		}
		if f.Cert.Cert != nil {
			attrs = append(attrs, "not_after", f.Cert.Cert.NotAfter.UTC())
		}
		if f.Severity == certs.Error {
			s.Log.Error("certificate problem", attrs...)
		} else {
			s.Log.Warn("certificate warning", attrs...)
		}
	}
	return fs
}

// runCertChecks repeats the certificate checks on the current
// configuration every interval until ctx ends.
func (s *Server) runCertChecks(interval time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				s.checkCurrentCertificates()
			}
		}
	}
}

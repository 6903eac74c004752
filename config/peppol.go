package config

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/spf13/viper"
)

// Peppol configures the receiving Peppol access point (AS4): senders
// without a partner file whose certificate chains to the AP CA.
type Peppol struct {
	Enabled bool `mapstructure:"enabled"`
	// APCA are the OpenPeppol AP CA files (the root and the AP CA, PEM or
	// DER); each one is a trust anchor.
	APCA []string `mapstructure:"ap_ca"`
	// Participants we receive for: "0088:5790000435975" (scheme
	// iso6523-actorid-upis) or "scheme::value".
	Participants []string         `mapstructure:"participants"`
	Revocation   PeppolRevocation `mapstructure:"revocation"`
	// ReporterID is our AP's seat ID (our AP certificate's CN, PXX000000)
	// written into the reports.
	ReporterID string `mapstructure:"reporter_id"`
	// Country is the ISO 3166 country of our end users (C4) for reports.
	Country string `mapstructure:"country"`
	// ReportDir keeps one JSON line per accepted transaction
	// (transactions-YYYY-MM.jsonl) for `gateway peppol report`.
	ReportDir string `mapstructure:"report_dir"`
}

// PeppolRevocation is the revocation check of AP certificates.
type PeppolRevocation struct {
	Mode          string   `mapstructure:"mode"`   // off, crl, ocsp (default), both
	Policy        string   `mapstructure:"policy"` // hard (default), soft
	OCSPResponder string   `mapstructure:"ocsp_responder"`
	CRLURLs       []string `mapstructure:"crl_urls"`
}

var (
	seatID      = regexp.MustCompile(`^P[A-Z]{2}[0-9]{6}$`)
	countryCode = regexp.MustCompile(`^[A-Z]{2}$`)
)

func (p *Peppol) resolvePaths(v *viper.Viper, base string) {
	if fromFile(v, "peppol.ap_ca") {
		for i := range p.APCA {
			p.APCA[i] = resolve(base, p.APCA[i])
		}
	}
	if fromFile(v, "peppol.report_dir") {
		p.ReportDir = resolve(base, p.ReportDir)
	}
}

func (p *Peppol) validate() error {
	if !p.Enabled {
		return nil
	}
	var errs []error
	if p.Revocation.Mode == "" {
		p.Revocation.Mode = "ocsp"
	}
	if p.Revocation.Policy == "" {
		p.Revocation.Policy = "hard"
	}
	if len(p.APCA) == 0 {
		errs = append(errs, errors.New("peppol.ap_ca: the OpenPeppol AP CA certificate files are required"))
	}
	if len(p.Participants) == 0 {
		errs = append(errs, errors.New("peppol.participants: at least one participant identifier is required"))
	}
	for i, s := range p.Participants {
		scheme, v, ok := strings.Cut(strings.TrimSpace(s), "::")
		if !ok {
			scheme, v = "iso6523-actorid-upis", strings.TrimSpace(s)
		}
		icd, rest, ok := strings.Cut(v, ":")
		if scheme == "iso6523-actorid-upis" && (!ok || len(icd) != 4 || strings.Trim(icd, "0123456789") != "" || rest == "") {
			errs = append(errs, fmt.Errorf("peppol.participants[%d]: %q is not ICD:identifier (0088:5790000435975)", i, s))
		}
	}
	switch p.Revocation.Mode {
	case "off", "crl", "ocsp", "both":
	default:
		errs = append(errs, fmt.Errorf("peppol.revocation.mode: %q is not one of off, crl, ocsp, both", p.Revocation.Mode))
	}
	switch p.Revocation.Policy {
	case "hard", "soft":
	default:
		errs = append(errs, fmt.Errorf("peppol.revocation.policy: %q is not one of hard, soft", p.Revocation.Policy))
	}
	for _, raw := range append(append([]string{}, p.Revocation.CRLURLs...), p.Revocation.OCSPResponder) {
		if raw == "" {
			continue
		}
		if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("peppol.revocation: %q is not an http(s) URL", raw))
		}
	}
	if p.ReporterID != "" && !seatID.MatchString(p.ReporterID) {
		errs = append(errs, fmt.Errorf("peppol.reporter_id: %q is not a seat ID (P, two letters, six digits)", p.ReporterID))
	}
	if p.Country != "" && !countryCode.MatchString(p.Country) {
		errs = append(errs, fmt.Errorf("peppol.country: %q is not an ISO 3166 alpha-2 code", p.Country))
	}
	if p.ReportDir == "" {
		errs = append(errs, errors.New("peppol.report_dir: required (accepted transactions are recorded there for the reports)"))
	}
	return errors.Join(errs...)
}

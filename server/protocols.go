package server

import (
	"fmt"
	"os"
	"time"

	"gateway/as2"
	"gateway/as4"
	"gateway/as4/endpoint"
	"gateway/cms"
	"gateway/outbox"
	"gateway/xmlenc"
)

// mountProtocols registers the AS2 and AS4 endpoints on the mux and starts
// the async MDN dispatcher.
func (s *Server) mountProtocols() error {
	cfg := s.Config
	var as2Keys []cms.KeyPair
	var as4Keys []xmlenc.KeyPair
	for i, k := range cfg.Identity.Keys {
		certPEM, err := os.ReadFile(k.Cert)
		if err != nil {
			return fmt.Errorf("server: identity.keys[%d].cert: %w", i, err)
		}
		keyPEM, err := os.ReadFile(k.Key)
		if err != nil {
			return fmt.Errorf("server: identity.keys[%d].key: %w", i, err)
		}
		if kp, err := cms.ParseKeyPair(certPEM, keyPEM); err == nil {
			as2Keys = append(as2Keys, kp)
		} else if cfg.Identity.AS2ID != "" {
			// AS2 (S/MIME) keys are RSA; an Ed25519 or X25519 key is for AS4 only.
			s.Log.Warn("identity key not usable for AS2; AS2 will not use it to decrypt or sign MDNs",
				"key", k.Cert, "err", err)
		}
		kp4, err := endpoint.ParseKeyPair(certPEM, keyPEM)
		if err != nil {
			return fmt.Errorf("server: identity.keys[%d]: %w", i, err)
		}
		as4Keys = append(as4Keys, kp4)
		s.identityCerts = append(s.identityCerts, kp4.Cert)
	}

	s.Pipeline.Ledger = timedLedger{Ledger: s.Backend, m: s.Metrics}
	ob := countedOutbox{Store: s.Backend.Outbox(), m: s.Metrics}
	d := &outbox.Dispatcher{Store: ob, Log: s.Log, UserAgent: "gateway/" + Version}
	notify := d.Notify
	s.background = append(s.background, d.Run)
	if cfg.Identity.AS2ID != "" {
		ep, err := as2.NewEndpoint(as2.Config{
			Partners: s.Partners, OurID: cfg.Identity.AS2ID, Keys: as2Keys, Pipeline: s.Pipeline,
			Outbox: ob, Notify: notify, SpoolDir: cfg.SpoolDir, MaxBodyBytes: cfg.Limits.MaxBodyBytes,
			Log: s.Log, ReportingUA: "gateway/" + Version,
		})
		if err != nil {
			return fmt.Errorf("server: as2: %w", err)
		}
		s.mux.Handle(cfg.AS2.Path, instrumentHTTP(s.Metrics, "as2", ep))
		s.endpoints = append(s.endpoints, "as2 "+cfg.AS2.Path)
	}
	if cfg.Identity.PartyID != "" && len(as4Keys) > 0 {
		ep, err := endpoint.New(endpoint.Config{
			Partners: s.Partners, Keys: as4Keys, Pipeline: s.Pipeline,
			PartyID: cfg.Identity.PartyID, PartyType: cfg.Identity.PartyType,
			Limits:   as4.Limits{MaxMessageSize: cfg.Limits.MaxBodyBytes},
			SpoolDir: cfg.SpoolDir, Log: s.Log,
		})
		if err != nil {
			return fmt.Errorf("server: as4: %w", err)
		}
		s.mux.Handle(cfg.AS4.Path, instrumentHTTP(s.Metrics, "as4", ep))
		s.endpoints = append(s.endpoints, "as4 "+cfg.AS4.Path)
	}
	return nil
}

// checkWindows refuses a retention shorter than a partner's dedup window:
// purging inside a window would let a late retransmission through.
func (s *Server) checkWindows() error {
	for _, p := range s.Partners.Partners {
		var w time.Duration
		if p.AS2 != nil && p.AS2.DedupWindow.Std() > w {
			w = p.AS2.DedupWindow.Std()
		}
		if p.AS4 != nil && p.AS4.DedupWindow.Std() > w {
			w = p.AS4.DedupWindow.Std()
		}
		if w > s.Config.Retention {
			return fmt.Errorf("server: retention %s is shorter than partner %s's dedup window %s (%s)", s.Config.Retention, p.ID, w, p.File)
		}
	}
	return nil
}

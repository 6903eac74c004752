package server

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"gateway/as2"
	"gateway/as4"
	"gateway/as4/endpoint"
	"gateway/certcheck"
	"gateway/cms"
	"gateway/config"
	"gateway/limits"
	"gateway/outbox"
	"gateway/partners"
	"gateway/retention"
	"gateway/xmlenc"
)

// mountProtocols builds the first configuration snapshot, registers the AS2
// and AS4 endpoints on the mux and starts the async MDN dispatcher. The
// mux's handlers serve each request from the snapshot current when it
// arrives (Reload replaces it).
func (s *Server) mountProtocols(dir *partners.Directory) error {
	cfg := s.Config
	s.Pipeline.Ledger = timedLedger{Ledger: s.Backend, m: s.Metrics}
	ob := countedOutbox{Store: s.Backend.Outbox(), m: s.Metrics}
	// Every attempt re-checks the URL against the partner's current
	// agreement and the addresses it connects to (issue 8 item 4).
	d := &outbox.Dispatcher{Store: ob, Log: s.Log, UserAgent: "gateway/" + Version, Audit: s.Pipeline.Audit,
		Authorize: func(ctx context.Context, del outbox.Delivery) (outbox.Permit, error) {
			return as2.AsyncMDNAuthorizer(s.Directory())(ctx, del)
		}}
	s.notify = d.Notify
	s.background = append(s.background, d.Run)
	snap, err := s.buildSnapshot(dir, cfg)
	if err != nil {
		return err
	}
	s.reload.current.Store(snap)
	now := time.Now()
	s.reload.status.Store(&ReloadStatus{Time: now, Trigger: "start", OK: true, LastSuccess: now, Partners: len(dir.Partners)})
	// One memory budget for both endpoints, for the life of the process
	// (not per snapshot); bodies are counted, reserved and rate-checked by
	// the same wrapper.
	budget := limits.NewBudget(cfg.Limits.MemoryBudget)
	if need := cfg.Limits.MaxBodyBytes * limits.DefaultAmplification; budget != nil && budget.Total() < need {
		s.Log.Warn("limits.memory_budget is smaller than a message of limits.max_body_bytes needs; larger messages get 413",
			"memory_budget", budget.Total(), "max_body_bytes", cfg.Limits.MaxBodyBytes, "largest_message", budget.Total()/limits.DefaultAmplification)
	}
	bodyLimits := func(protocol string, h http.Handler) http.Handler {
		o := limits.BodyOptions{
			MaxBytes: cfg.Limits.MaxBodyBytes, Budget: budget,
			MinRate: cfg.Limits.MinBodyRate, Grace: cfg.Limits.MinBodyRateGrace, MaxDuration: cfg.Limits.ReadTimeout,
			Protocol: protocol, Log: s.Log,
		}
		if protocol == "as2" {
			// AS2 bodies over the stream threshold are streamed: a fixed
			// reservation, up to max_streamed_body_bytes.
			o.MaxBytes, o.StreamAbove = max(cfg.Limits.MaxStreamedBodyBytes, cfg.Limits.MaxBodyBytes), as2.DefaultStreamThreshold
		}
		return limits.Handler(h, o)
	}
	if snap.as2 != nil {
		s.reload.as2Mounted = true
		s.mux.Handle(cfg.AS2.Path, instrumentHTTP(s.Metrics, "as2", bodyLimits("as2", s.handle(func(c *Snapshot) http.Handler { return c.as2 }))))
		s.endpoints = append(s.endpoints, "as2 "+cfg.AS2.Path)
	}
	if snap.as4 != nil {
		s.reload.as4Mounted = true
		s.mux.Handle(cfg.AS4.Path, instrumentHTTP(s.Metrics, "as4", bodyLimits("as4", s.handle(func(c *Snapshot) http.Handler { return c.as4 }))))
		s.endpoints = append(s.endpoints, "as4 "+cfg.AS4.Path)
	}
	return nil
}

// buildSnapshot reads the identity keys of cfg and builds the endpoints on
// them and dir. The AS2 endpoint exists when identity.as2_id is set, the
// AS4 endpoint when identity.party_id is set and a key is usable for AS4.
func (s *Server) buildSnapshot(dir *partners.Directory, cfg *config.Config) (*Snapshot, error) {
	var as2Keys []cms.KeyPair
	var as4Keys []xmlenc.KeyPair
	for i, k := range cfg.Identity.Keys {
		certPEM, err := os.ReadFile(k.Cert)
		if err != nil {
			return nil, fmt.Errorf("server: identity.keys[%d].cert: %w", i, err)
		}
		keyPEM, err := os.ReadFile(k.Key)
		if err != nil {
			return nil, fmt.Errorf("server: identity.keys[%d].key: %w", i, err)
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
			return nil, fmt.Errorf("server: identity.keys[%d] (%s, %s): %w", i, k.Cert, k.Key, err)
		}
		as4Keys = append(as4Keys, kp4)
	}
	snap := &Snapshot{Partners: dir, Keys: cfg.Identity.Keys, CertWarning: cfg.CertWarning, Loaded: time.Now()}
	ids, _ := certcheck.IdentityCerts(cfg.Identity.Keys)
	snap.Certificates = append(ids, certcheck.PartnerCerts(dir)...)
	id := s.Config.Identity // names and paths are fixed at start
	lim := s.Config.Limits
	ratio := lim.MaxCompressionRatio
	if ratio == 0 {
		ratio = -1 // configured off
	}
	if id.AS2ID != "" {
		ep, err := as2.NewEndpoint(as2.Config{
			Partners: dir, OurID: id.AS2ID, Keys: as2Keys, Pipeline: s.Pipeline,
			Outbox: s.Backend.Outbox(), Notify: s.notify, SpoolDir: s.spoolDir,
			MaxBodyBytes: max(lim.MaxStreamedBodyBytes, lim.MaxBodyBytes), MaxInMemoryBytes: lim.MaxBodyBytes,
			MaxDecompressedBytes: lim.MaxDecompressedBytes, MaxCompressionRatio: ratio,
			Log: s.Log, ReportingUA: "gateway/" + Version,
		})
		if err != nil {
			return nil, fmt.Errorf("server: as2: %w", err)
		}
		snap.as2 = ep
	}
	if id.PartyID != "" && len(as4Keys) > 0 {
		ep, err := endpoint.New(endpoint.Config{
			Partners: dir, Keys: as4Keys, Pipeline: s.Pipeline,
			PartyID: id.PartyID, PartyType: id.PartyType,
			Limits:         as4.Limits{MaxMessageSize: lim.MaxBodyBytes, MaxEnvelopeSize: lim.MaxEnvelopeBytes, SpoolDir: s.spoolDir},
			MaxPayloadSize: lim.MaxDecompressedBytes, MaxCompressionRatio: ratio,
			SpoolDir: s.spoolDir, Log: s.Log,
		})
		if err != nil {
			return nil, fmt.Errorf("server: as4: %w", err)
		}
		snap.as4 = ep
	}
	return snap, nil
}

// checkWindows refuses a retention shorter than a partner's dedup window:
// purging inside a window would let a late retransmission through.
func checkWindows(d *partners.Directory, retentionPeriod time.Duration) error {
	if err := retention.CheckWindows(retentionPeriod, d.Partners); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	return nil
}

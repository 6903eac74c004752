package server

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/edigateway/gateway/as2"
	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/endpoint"
	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/certs"
	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/limits"
	"github.com/edigateway/gateway/internal/peppol"
	"github.com/edigateway/gateway/internal/retention"
	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/internal/xmlenc"
	"github.com/edigateway/gateway/outbox"
	"github.com/edigateway/gateway/partners"
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
	// Leases are short and renewed while a delivery is held; a stop lets
	// the attempts in flight finish within shutdown_timeout and hands
	// every other leased delivery back at once (issue 26).
	d := &outbox.Dispatcher{Store: ob, Log: s.Log, UserAgent: "gateway/" + Version, Audit: s.Pipeline.Audit,
		Lease: cfg.Outbox.Lease, Heartbeat: cfg.Outbox.HeartbeatInterval(), StopTimeout: cfg.ShutdownTimeout,
		Authorize: func(ctx context.Context, del outbox.Delivery) (outbox.Permit, error) {
			return as2.AsyncMDNAuthorizer(s.Directory())(ctx, del)
		}}
	s.notify = d.Notify
	s.background = append(s.background, d.Run)
	if err := s.mountSending(); err != nil {
		return err
	}
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
	// One source address, and the requests naming one partner, hold at
	// most their share of it (issue 22: slow bodies from one sender held
	// the whole budget and every partner got 503).
	share := func(key string, percent int) int64 {
		if percent <= 0 {
			percent = limits.DefaultSharePercent
		}
		if percent >= 100 && budget != nil {
			s.Log.Warn(key+" is 100: one sender may hold the whole memory budget and keep every partner out", "memory_budget", budget.Total())
		}
		return budget.Total() / 100 * int64(percent)
	}
	budget.SetShares(share("limits.memory_share_per_source", cfg.Limits.MemorySharePerSource),
		share("limits.memory_share_per_partner", cfg.Limits.MemorySharePerPartner))
	// Bodies are streamed; what is held in memory whole is an AS2 body
	// that cannot be streamed (up to as2.DefaultMaxBodyBytes) and the AS4
	// SOAP envelope (up to max_envelope_bytes).
	inMemory := min(cfg.Limits.BodyLimit(), as2.DefaultMaxBodyBytes)
	perSource, perPartner := budget.Shares()
	room := budget.Total()
	for _, sh := range []int64{perSource, perPartner} {
		if sh > 0 {
			room = min(room, sh)
		}
	}
	if need := inMemory * limits.DefaultAmplification; budget != nil && room < need {
		s.Log.Warn("limits.memory_budget (or the share of one source address or partner) is smaller than an AS2 message that cannot be streamed needs; larger ones get 413",
			"memory_budget", budget.Total(), "memory_share_per_source", perSource, "memory_share_per_partner", perPartner,
			"in_memory_limit", inMemory, "largest_message", room/limits.DefaultAmplification)
	}
	var as2IDs []string
	for _, id := range s.Config.AllIdentities() {
		if id.AS2ID != "" {
			as2IDs = append(as2IDs, id.AS2ID)
		}
	}
	global := cfg.Limits.BodyLimit()
	bodyLimits := func(protocol string, h http.Handler) http.Handler {
		o := limits.BodyOptions{
			// The largest limit of any partner (max_body_bytes overrides):
			// the endpoint applies the partner's own once it is known.
			MaxBytesFunc: func() int64 { return s.Current().Partners.MaxBodyLimit(global) },
			Budget:       budget,
			MinRate:      cfg.Limits.MinBodyRate, Grace: cfg.Limits.MinBodyRateGrace, MaxDuration: cfg.Limits.ReadTimeout,
			Protocol: protocol, Log: s.Log,
		}
		switch protocol {
		case "as2":
			// AS2 bodies over the stream threshold are streamed: a
			// reservation that grows with the bytes that arrive, up to the
			// streaming's fixed buffers. The partner named by AS2-From
			// and AS2-To (not yet authenticated) is charged its share;
			// an AS4 request is charged to its partner's once the
			// envelope names it (the endpoint).
			o.StreamAbove = as2.DefaultStreamThreshold
			o.Partner = func(r *http.Request) string { return as2Partner(s.Current().Partners, r.Header, as2IDs) }
		case "as4":
			// AS4 attachments are always streamed; the envelope part, up
			// to max_envelope_bytes, is held and parsed.
			o.StreamAbove = cfg.Limits.MaxEnvelopeBytes
			// The envelope is read first and held: four bytes per byte
			// read until the cap (its parsed tree is charged apart, by
			// the endpoint).
			o.StreamReserve = limits.DefaultStreamReserve + cfg.Limits.MaxEnvelopeBytes*limits.DefaultAmplification
			o.StreamGrowth = limits.DefaultAmplification
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

// as2Partner is the ID of the partner an AS2 request names with AS2-From
// and AS2-To (not yet authenticated), for its share of the memory budget;
// "" when it names none (the endpoint refuses it before reading its body).
func as2Partner(d *partners.Directory, h http.Header, ourIDs []string) string {
	req, err := as2.ParseHeaders(h)
	if err != nil {
		return ""
	}
	for _, id := range ourIDs {
		if p, ok := d.ByAS2(req.From, req.To, id); ok {
			return p.ID
		}
	}
	return ""
}

// buildSnapshot reads the identity keys of cfg and builds the endpoints on
// them and dir. The AS2 endpoint exists when identity.as2_id is set, the
// AS4 endpoint when identity.party_id is set and a key is usable for AS4.
// Each identity of identities[] adds an AS2 name (as2_id) and/or an ebMS
// party (party_id) with its own keys: the first identity with as2_id is the
// AS2 endpoint's OurID, the first with party_id the AS4 endpoint's party.
func (s *Server) buildSnapshot(dir *partners.Directory, cfg *config.Config) (*Snapshot, error) {
	// Names are fixed at start (a change needs a restart); keys reload.
	running, next := s.Config.AllIdentities(), cfg.AllIdentities()
	if !sameIdentityNames(running, next) {
		next = running
	}
	var as2IDs []as2.Identity
	var as4IDs []endpoint.Identity
	var allKeys []config.KeyPair
	var sends []sendKeys
	for j, id := range next {
		name := running[j]
		as2Keys, as4Keys, err := s.loadIdentityKeys(id)
		if err != nil {
			return nil, err
		}
		sends = append(sends, loadSendKeys(name, id.Keys, as4Keys))
		allKeys = append(allKeys, id.Keys...)
		if name.AS2ID != "" {
			as2IDs = append(as2IDs, as2.Identity{ID: name.AS2ID, Keys: as2Keys})
		}
		if name.PartyID != "" && len(as4Keys) > 0 {
			as4IDs = append(as4IDs, endpoint.Identity{PartyID: name.PartyID, PartyType: name.PartyType, Keys: as4Keys})
		}
	}
	// Our identities for sending: a key that cannot sign is refused for
	// the first identity (as before identities could send) and for every
	// identity a partner sends as.
	for j, k := range sends {
		if k.err != nil && (j == 0 || sendsAs(dir, running, j)) {
			return nil, k.err
		}
	}
	snap := &Snapshot{Partners: dir, Keys: allKeys, CertWarning: cfg.CertWarning, Loaded: time.Now(), sends: sends}
	ids, _ := certs.IdentityCerts(allKeys)
	snap.Certificates = append(ids, certs.PartnerCerts(dir)...)
	snap.Certificates = append(snap.Certificates, trustCerts(dir, cfg.Peppol)...)
	if s.trust == nil {
		s.trust = &trust.Checker{Log: s.Log}
	}
	pap, err := s.peppolAP(cfg)
	if err != nil {
		return nil, err
	}
	lim := s.Config.Limits
	ratio := lim.MaxCompressionRatio
	if ratio == 0 {
		ratio = -1 // configured off
	}
	if len(as2IDs) > 0 {
		ep, err := as2.NewEndpoint(as2.Config{
			Partners: dir, OurID: as2IDs[0].ID, Keys: as2IDs[0].Keys, Identities: as2IDs[1:], Pipeline: s.Pipeline,
			Outbox: s.Backend.Outbox(), Notify: s.notify, SpoolDir: s.spoolDir,
			MaxBodyBytes: lim.BodyLimit(), MaxInMemoryBytes: min(lim.BodyLimit(), as2.DefaultMaxBodyBytes),
			MaxDecompressedBytes: lim.MaxDecompressedBytes, MaxCompressionRatio: ratio,
			Log: s.Log, ReportingUA: "gateway/" + Version, Trust: s.trust,
			MDNs: mdnIntake{s},
		})
		if err != nil {
			return nil, fmt.Errorf("server: as2: %w", err)
		}
		snap.as2 = ep
	}
	if len(as4IDs) > 0 {
		proxies, err := config.ParseProxies(s.Config.AS4.TrustedProxies)
		if err != nil {
			return nil, fmt.Errorf("server: as4.trusted_proxies: %w", err)
		}
		ep, err := endpoint.New(endpoint.Config{
			Partners: dir, Keys: as4IDs[0].Keys, Pipeline: s.Pipeline,
			PartyID: as4IDs[0].PartyID, PartyType: as4IDs[0].PartyType, Identities: as4IDs[1:],
			Limits:         as4.Limits{MaxMessageSize: lim.BodyLimit(), MaxEnvelopeSize: lim.MaxEnvelopeBytes, SpoolDir: s.spoolDir},
			MaxPayloadSize: lim.MaxDecompressedBytes, MaxCompressionRatio: ratio,
			SpoolDir: s.spoolDir, Log: s.Log, Trust: s.trust, Peppol: pap,
			ClientCertHeader: s.Config.AS4.ClientCertHeader, TrustedProxies: proxies,
		})
		if err != nil {
			return nil, fmt.Errorf("server: as4: %w", err)
		}
		snap.as4 = ep
	}
	return snap, nil
}

// sameIdentityNames reports whether a and b name the same identities in
// the same order.
func sameIdentityNames(a, b []config.Identity) bool {
	return slices.EqualFunc(a, b, func(x, y config.Identity) bool {
		return x.AS2ID == y.AS2ID && x.PartyID == y.PartyID && x.PartyType == y.PartyType
	})
}

// loadIdentityKeys reads the key pairs of one identity (PEM, DER or
// PKCS#12) and judges them: an expired certificate of ours, or a short RSA
// key, is refused at start and on reload (the running configuration then
// stays).
func (s *Server) loadIdentityKeys(id config.Identity) ([]cms.KeyPair, []xmlenc.KeyPair, error) {
	var as2Keys []cms.KeyPair
	var as4Keys []xmlenc.KeyPair
	for i, k := range id.Keys {
		field := k.Field
		if field == "" {
			field = fmt.Sprintf("identity.keys[%d]", i)
		}
		// PEM, DER or PKCS#12 (keyfile), handed to the protocols as PEM.
		cert, key, err := certs.KeyPair(k.Cert, k.Key, k.Password())
		if err != nil {
			return nil, nil, fmt.Errorf("server: %s: %w", field, err)
		}
		certPEM, keyPEM, err := certs.PEM(cert, key)
		if err != nil {
			return nil, nil, fmt.Errorf("server: %s: %w", field, err)
		}
		if kp, err := cms.ParseKeyPair(certPEM, keyPEM); err == nil {
			as2Keys = append(as2Keys, kp)
		} else if id.AS2ID != "" {
			// AS2 (S/MIME) keys are RSA; an Ed25519 or X25519 key is for AS4 only.
			s.Log.Warn("identity key not usable for AS2; AS2 will not use it to decrypt or sign MDNs",
				"key", k.Cert, "field", field, "err", err)
		}
		kp4, err := endpoint.ParseKeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, nil, fmt.Errorf("server: %s (%s, %s): %w", field, k.Cert, k.Key, err)
		}
		file := k.Cert
		if file == "" {
			file = k.Key
		}
		if err := trust.CheckOwn(kp4.Cert, time.Now(), trust.Policy{AllowWeakKeys: id.AllowWeakKeys}); err != nil {
			return nil, nil, fmt.Errorf("server: %s (%s): our %w", field, file, err)
		}
		if weak, _ := trust.CheckKeySize(kp4.Cert, trust.Policy{AllowWeakKeys: true}); weak && id.AllowWeakKeys {
			s.Log.Warn("identity key with a weak RSA key accepted (allow_weak_keys)", "key", file, "field", field,
				"bits", trust.KeyBits(kp4.Cert), "subject", kp4.Cert.Subject.String())
		}
		as4Keys = append(as4Keys, kp4)
	}
	return as2Keys, as4Keys, nil
}

// checkWindows refuses a retention shorter than a partner's dedup window:
// purging inside a window would let a late retransmission through.
func checkWindows(d *partners.Directory, retentionPeriod time.Duration) error {
	if err := retention.CheckWindows(retentionPeriod, d.Partners); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	return nil
}

// checkIdentities refuses partner files that name an identity we do not
// have (as2.our_as2_id, as4.send.from_party_id).
func checkIdentities(d *partners.Directory, ids []config.Identity) error {
	if err := d.CheckIdentities(ids); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	return nil
}

// peppolAP builds the receiving Peppol access point of cfg (nil when
// peppol.enabled is off). The AP CA files are read at start and reload.
func (s *Server) peppolAP(cfg *config.Config) (*peppol.AP, error) {
	pc := cfg.Peppol
	if !pc.Enabled {
		return nil, nil
	}
	var cas []*x509.Certificate
	for i, f := range pc.APCA {
		c, err := partners.ReadCertificates(f)
		if err != nil {
			return nil, fmt.Errorf("server: peppol.ap_ca[%d]: %w", i, err)
		}
		cas = append(cas, c...)
	}
	if s.peppolRecords == nil {
		s.peppolRecords = &peppol.Recorder{Dir: pc.ReportDir}
	}
	ap, err := peppol.New(peppol.Settings{APCA: cas, Participants: pc.Participants, ReporterID: pc.ReporterID, Country: pc.Country,
		Revocation: trust.Revocation{Mode: pc.Revocation.Mode, Policy: pc.Revocation.Policy,
			OCSPResponder: pc.Revocation.OCSPResponder, CRLURLs: pc.Revocation.CRLURLs},
		Records: s.peppolRecords})
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	return ap, nil
}

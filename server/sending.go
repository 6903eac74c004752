package server

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/edigateway/gateway/as2"
	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/brainpool"
	"github.com/edigateway/gateway/internal/certs"
	"github.com/edigateway/gateway/internal/pickup"
	"github.com/edigateway/gateway/internal/submitapi"
	"github.com/edigateway/gateway/internal/transmit"
	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/internal/xmlenc"
	"github.com/edigateway/gateway/mdn"
	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/partners"
)

// sending is the outbound side of the gateway: the queue of messages to
// partners, the Sender that works it and the two Transmitters.
type sending struct {
	store  outbound.Store
	queue  *outbound.Queue
	sender *outbound.Sender
	as2    *transmit.AS2
	as4    *transmit.AS4
	// partnerURL is the partner listener's base URL once serving (the
	// default of an async MDN URL when public_url is not set).
	partnerURL atomic.Pointer[string]
}

// mountSending builds the queue, the transmitters and the Sender, and adds
// the Sender (and the pickup directories, when configured) to the
// background workers.
func (s *Server) mountSending() error {
	cfg := s.Config
	// Counted: every final state reaches gateway_outbound_final_total once,
	// whoever ends the message (Sender, async MDN, operator).
	st := s.outboundStore()
	if st == nil {
		return errors.New("server: the store has no outbound queue")
	}
	sd := &sending{store: st}
	s.sending = sd
	sd.as2 = transmit.NewAS2(func(partner string) (transmit.Identity, error) { return s.sendIdentity(outbound.AS2, partner) },
		s.as2SendSettings, s.spoolDir)
	sd.as4 = transmit.NewAS4(func(partner string) (transmit.Identity, error) { return s.sendIdentity(outbound.AS4, partner) },
		s.as4SendSettings, s.spoolDir)
	sd.sender = outbound.NewSender(outbound.SenderConfig{
		Store:        s.fault.wrapOutbound(st), // the send-* kill points of the gatewayfault build
		Transmitters: map[outbound.Protocol]outbound.Transmitter{outbound.AS2: sd.as2, outbound.AS4: sd.as4},
		Policy:       s.sendPolicy,
		Audit:        s.Pipeline.Audit,
		Log:          s.Log.With("component", "sender"),
		Lease:        cfg.Outbound.Lease,
		Heartbeat:    cfg.Outbound.HeartbeatInterval(),
		Workers:      cfg.Outbound.Workers,
		StopTimeout:  cfg.ShutdownTimeout,
		Observer:     s.Metrics,
	})
	sd.queue = &outbound.Queue{
		Store:   st,
		Resolve: s.resolveSending,
		NewMessageID: func(p outbound.Protocol, partner string) (string, error) {
			// From the names of the identity we send as (its key is not
			// needed for the id).
			k, _, err := s.sendKeysFor(p, partner)
			if err != nil {
				return "", err
			}
			return transmit.NewMessageID(p, k.id)
		},
		Notify: sd.sender.Notify,
		Audit:  s.Pipeline.Audit,
		Log:    s.Log.With("component", "queue"),
	}
	s.wakeSender = sd.sender.Notify
	s.background = append(s.background, sd.sender.Run)
	if cfg.Outbound.PickupDir != "" {
		w, err := pickup.New(pickup.Config{
			Dir: cfg.Outbound.PickupDir, Interval: cfg.Outbound.PickupInterval,
			Targets: s.pickupTargets, Submitter: sd.queue, Store: st,
			MaxPayload: cfg.Outbound.MaxPayloadBytes, Log: s.Log.With("component", "pickup"),
		})
		if err != nil {
			return fmt.Errorf("server: outbound.pickup_dir: %w", err)
		}
		s.background = append(s.background, w.Run)
	}
	return nil
}

// Submit queues a payload for a partner: the Go API of sending (the HTTP
// submission API, the pickup directories and `gateway submit` end here
// too). It returns the queued message, created false when the
// submission's IdempotencyKey was queued for the partner before (that
// message is returned and the payload is not read). The payload is stored
// durably before Submit returns; the message is then sent by the gateway
// that serves (this one or another on the same store) until a verified
// MDN or receipt, a final refusal, or the partner's give-up age.
func (s *Server) Submit(ctx context.Context, sub outbound.Submission) (outbound.Message, bool, error) {
	if sub.Source == "" {
		sub.Source = "api"
	}
	return s.sending.queue.Submit(ctx, sub)
}

// Outbound is the queue of messages to partners (status, list, cancel,
// resend; Submit queues).
func (s *Server) Outbound() outbound.Store { return s.sending.store }

// submissionAPI is the HTTP submission API (admin listener).
func (s *Server) submissionAPI() http.Handler {
	return submitapi.New(submitapi.Config{
		Submitter: s.sending.queue, Store: s.sending.store, Log: s.Log.With("component", "submit-api"),
		MaxPayload: s.Config.Outbound.MaxPayloadBytes,
		Errors: []submitapi.ErrorStatus{
			{Err: outbound.ErrUnknownPartner, Status: http.StatusNotFound},
			{Err: outbound.ErrNoSending, Status: http.StatusUnprocessableEntity},
			{Err: outbound.ErrInvalid, Status: http.StatusBadRequest},
		},
	})
}

// partnerByID is the partner with id in the directory in force.
func (s *Server) partnerByID(id string) (*partners.Directory, *partners.Partner, bool) {
	dir := s.Directory()
	for _, p := range dir.Partners {
		if p.ID == id {
			return dir, p, true
		}
	}
	return dir, nil, false
}

// resolveSending is the Queue's check of a submission's partner and
// protocol.
func (s *Server) resolveSending(partner string, p outbound.Protocol) (outbound.Protocol, error) {
	_, pt, ok := s.partnerByID(partner)
	if !ok {
		return "", fmt.Errorf("%w: %q", outbound.ErrUnknownPartner, partner)
	}
	sends := pt.Sends()
	switch {
	case p != "":
		for _, q := range sends {
			if q == p {
				return p, nil
			}
		}
		return "", fmt.Errorf("%w: partner %q has no %s send block", outbound.ErrNoSending, partner, p)
	case len(sends) == 1:
		return sends[0], nil
	case len(sends) == 0:
		return "", fmt.Errorf("%w: partner %q has no send block (as2.send or as4.send)", outbound.ErrNoSending, partner)
	default:
		return "", fmt.Errorf("%w: partner %q sends with AS2 and AS4; name the protocol", outbound.ErrNoSending, partner)
	}
}

// pickupTargets are the partners that send, for the pickup directories.
func (s *Server) pickupTargets() []pickup.Target {
	var ts []pickup.Target
	for _, p := range s.Directory().Partners {
		if sends := p.Sends(); len(sends) > 0 {
			t := pickup.Target{Partner: p.ID, Protocols: sends}
			if p.AS4 != nil && p.AS4.Send != nil {
				t.FilenameProperty = p.AS4.Send.FilenameProperty
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// sendPolicy is a partner's retry schedule for a protocol.
func (s *Server) sendPolicy(partner string, p outbound.Protocol) outbound.RetryPolicy {
	_, pt, ok := s.partnerByID(partner)
	switch {
	case !ok:
	case p == outbound.AS2 && pt.AS2 != nil && pt.AS2.Send != nil:
		return pt.AS2.Send.Retry.Policy()
	case p == outbound.AS4 && pt.AS4 != nil && pt.AS4.Send != nil:
		return pt.AS4.Send.Retry.Policy()
	}
	return outbound.DefaultRetryPolicy
}

// sendKeys are one identity's names and keys for sending: id with its
// first key (err: that key cannot sign), bdew with its brainpoolP256r1
// signing key for bdew partners (nil: it has none).
type sendKeys struct {
	id   transmit.Identity
	err  error
	bdew *transmit.Identity
}

// loadSendKeys reads the sending keys of the identity named name: keys[0]
// signs; for bdew partners the first brainpoolP256r1 key of as4Keys
// whose certificate allows signatures (as for our receipts to them:
// the profile gives signing and encryption separate key pairs), else
// keys[0] too.
func loadSendKeys(name config.Identity, keys []config.KeyPair, as4Keys []xmlenc.KeyPair) sendKeys {
	var out sendKeys
	out.id, out.err = loadSendIdentity(config.Identity{AS2ID: name.AS2ID, PartyID: name.PartyID, PartyType: name.PartyType, Keys: keys})
	for _, k := range as4Keys {
		bk, ok := k.Key.(*brainpool.PrivateKey)
		if !ok || k.Cert == nil || !bk.PublicKey().Equal(k.Cert.PublicKey) || !maySign(k.Cert) {
			continue
		}
		id := out.id
		id.Cert, id.Key, id.Chain = k.Cert, bk, nil
		out.bdew = &id
		break
	}
	return out
}

// maySign reports whether a certificate's key usage allows signatures
// (none written allows all).
func maySign(c *x509.Certificate) bool {
	return c.KeyUsage == 0 || c.KeyUsage&(x509.KeyUsageDigitalSignature|x509.KeyUsageContentCommitment) != 0
}

// loadSendIdentity reads the signing key of an identity: its first key.
func loadSendIdentity(id config.Identity) (transmit.Identity, error) {
	out := transmit.Identity{AS2ID: id.AS2ID, PartyID: id.PartyID, PartyType: id.PartyType}
	if len(id.Keys) == 0 {
		return out, nil
	}
	k := id.Keys[0]
	cert, key, err := certs.KeyPair(k.Cert, k.Key, k.Password())
	if err != nil {
		return out, fmt.Errorf("server: identity key %s: %w", k.Cert, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return out, fmt.Errorf("server: identity key %s cannot sign", k.Key)
	}
	out.Cert, out.Key = cert, signer
	return out, nil
}

// sendsAs reports whether a partner of dir sends (as2.send or as4.send)
// as identity j of ids.
func sendsAs(dir *partners.Directory, ids []config.Identity, j int) bool {
	for _, p := range dir.Partners {
		for _, proto := range p.Sends() {
			if p.SendIdentity(proto, ids) == j {
				return true
			}
		}
	}
	return false
}

// sendKeysFor is the identity we are towards partner with proto
// (partners.Partner.SendIdentity: as2.our_as2_id, as4.send.from_party_id,
// else the first identity with an as2_id / party_id), with its keys from
// the snapshot in force, and the partner.
func (s *Server) sendKeysFor(proto outbound.Protocol, partner string) (sendKeys, *partners.Partner, error) {
	snap := s.Current()
	var p *partners.Partner
	for _, q := range snap.Partners.Partners {
		if q.ID == partner {
			p = q
		}
	}
	if p == nil {
		return sendKeys{}, nil, fmt.Errorf("no partner %q in the partner directory", partner)
	}
	ids := s.Config.AllIdentities()
	j := p.SendIdentity(proto, ids)
	if j < 0 || j >= len(snap.sends) {
		switch {
		case proto == outbound.AS2 && p.AS2 != nil && p.AS2.OurID != "":
			return sendKeys{}, p, fmt.Errorf("as2.our_as2_id %q of partner %q is the as2_id of none of our identities", p.AS2.OurID, partner)
		case proto == outbound.AS4 && p.AS4 != nil && p.AS4.Send != nil && p.AS4.Send.FromPartyID != "":
			return sendKeys{}, p, fmt.Errorf("as4.send.from_party_id %q of partner %q is the party_id of none of our identities", p.AS4.Send.FromPartyID, partner)
		case proto == outbound.AS2:
			return sendKeys{}, p, errors.New("none of our identities has an as2_id")
		}
		return sendKeys{}, p, errors.New("none of our identities has a party_id")
	}
	return snap.sends[j], p, nil
}

// sendIdentity is our identity towards partner with proto, with the key
// that signs: the identity's first key, for a bdew partner its brainpool
// signing key. It is read at every attempt from the snapshot in force, so
// that a reloaded key signs the next attempt.
func (s *Server) sendIdentity(proto outbound.Protocol, partner string) (transmit.Identity, error) {
	k, p, err := s.sendKeysFor(proto, partner)
	switch {
	case err != nil:
		return transmit.Identity{}, err
	case proto == outbound.AS4 && k.bdew != nil && p.AS4 != nil && strings.EqualFold(p.AS4.Profile, transmit.ProfileBDEW):
		return *k.bdew, nil
	case k.err != nil:
		return transmit.Identity{}, k.err
	}
	return k.id, nil
}

// sendTLS is the transmitters' TLS settings of a send block (files
// relative to the partners directory).
func sendTLS(dir *partners.Directory, t partners.SendTLS) transmit.TLS {
	file := func(f string) string {
		if f == "" {
			return ""
		}
		return dir.SendFile(f)
	}
	return transmit.TLS{CAFile: file(t.CAFile), PinnedCertificate: file(t.PinnedCertificate),
		ClientCertificate: file(t.ClientCertificate), ClientKey: file(t.ClientKey)}
}

// as2SendSettings maps a partner's as2.send block to the AS2
// Transmitter's settings.
func (s *Server) as2SendSettings(partner string) (*transmit.AS2Settings, error) {
	dir, p, ok := s.partnerByID(partner)
	if !ok {
		return nil, fmt.Errorf("no partner %q in the partner directory", partner)
	}
	if p.AS2 == nil || p.AS2.Send == nil {
		return nil, fmt.Errorf("partner %q has no as2.send block", partner)
	}
	snd := p.AS2.Send
	certs := dir.AS2Certificates(p)
	if enc := dir.SendEncryptionCertificate(p, outbound.AS2); enc != nil {
		certs = append([]*x509.Certificate{enc}, certs...)
	}
	st := &transmit.AS2Settings{
		URL: snd.URL, To: p.AS2.ID, // AS2-From: the identity we send as (sendIdentity)
		Digest: snd.Digest, Cipher: snd.Cipher, Compression: snd.Compression,
		MDN: snd.MDN, SignedMDN: snd.SignedMDN, AsyncMDNURL: snd.AsyncMDNURL,
		ContentType: snd.ContentType, Subject: snd.Subject,
		PartnerCerts: certs, AllowWeakKeys: p.AS2.AllowWeakKeys,
		TLS: sendTLS(dir, snd.TLS), Timeout: snd.Timeout.Std(), MDNTimeout: snd.MDNTimeout.Std(),
	}
	st.CA = s.sendCATrust(dir.AS2Trust(p))
	if st.MDN == partners.MDNAsync && st.AsyncMDNURL == "" {
		u, err := s.asyncMDNURL()
		if err != nil {
			return nil, err
		}
		st.AsyncMDNURL = u
	}
	return st, nil
}

// sendCATrust is the transmitters' check of a trust: ca partner's MDN,
// receipt and error signal signers: its CA policy (nil: pinned
// certificates only) with the checker receiving uses, so that both share
// the revocation cache.
func (s *Server) sendCATrust(pol *trust.CAPolicy) *transmit.CATrust {
	if pol == nil {
		return nil
	}
	return &transmit.CATrust{Policy: pol, Checker: s.trust}
}

// asyncMDNURL is where partners post the asynchronous MDNs of our
// messages: public_url + as2.path, else the partner listener's address.
func (s *Server) asyncMDNURL() (string, error) {
	path := s.Config.AS2.Path
	if s.Config.PublicURL != "" {
		return strings.TrimRight(s.Config.PublicURL, "/") + path, nil
	}
	if u := s.sending.partnerURL.Load(); u != nil {
		return *u + path, nil
	}
	return "", errors.New("no URL for asynchronous MDNs: set public_url or the partner's as2.send.async_mdn_url")
}

// servingPartners records the partner listener's address for the async
// MDN URL of a gateway without public_url.
func (s *Server) servingPartners(ln net.Listener) {
	if s.sending == nil || ln == nil {
		return
	}
	host, port, err := net.SplitHostPort(ln.Addr().String())
	if err != nil {
		return
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	scheme := "http"
	if s.Config.TLS.Cert != "" {
		scheme = "https"
	}
	u := scheme + "://" + net.JoinHostPort(host, port)
	s.sending.partnerURL.Store(&u)
}

// as4SendSettings maps a partner's as4.send block to the AS4
// Transmitter's settings.
func (s *Server) as4SendSettings(partner string) (*transmit.AS4Settings, error) {
	dir, p, ok := s.partnerByID(partner)
	if !ok {
		return nil, fmt.Errorf("no partner %q in the partner directory", partner)
	}
	if p.AS4 == nil || p.AS4.Send == nil {
		return nil, fmt.Errorf("partner %q has no as4.send block", partner)
	}
	snd := p.AS4.Send
	pm := snd.PMode
	st := &transmit.AS4Settings{
		URL:      snd.URL,
		To:       as4.PartyID{Value: pm.ToPartyID, Type: pm.ToPartyType},
		FromRole: pm.FromRole, ToRole: pm.ToRole,
		AgreementRef: pm.Agreement, AgreementType: pm.AgreementType, PMode: pm.ID,
		Service: pm.Service, ServiceType: pm.ServiceType, Action: pm.Action,
		ReceiptSigners:   dir.AS4Certificates(p),
		Compress:         snd.Compress,
		ReceiptRequired:  snd.ReceiptRequired,
		FilenameProperty: snd.FilenameProperty,
		AllowWeakKeys:    p.AS4.AllowWeakKeys,
		TLS:              sendTLS(dir, snd.TLS), Timeout: snd.Timeout.Std(),
	}
	st.CA = s.sendCATrust(dir.AS4Trust(p))
	if st.To.Value == "" {
		st.To = as4.PartyID{Value: p.AS4.PartyID, Type: p.AS4.PartyType}
	}
	if strings.EqualFold(p.AS4.Profile, transmit.ProfileBDEW) {
		st.Profile = transmit.ProfileBDEW
	}
	if snd.Encrypt {
		st.EncryptTo = dir.SendEncryptionCertificate(p, outbound.AS4)
		if st.EncryptTo == nil {
			return nil, fmt.Errorf("partner %q: as4.send.encrypt needs a certificate to encrypt for", partner)
		}
	}
	return st, nil
}

// mdnIntake settles our outbound AS2 messages with the asynchronous MDNs
// partners post to the AS2 endpoint (as2.MDNReceiver).
type mdnIntake struct{ s *Server }

// ReceiveMDN matches an MDN to the partner's message by its
// Original-Message-ID, verifies it (signature against the partner's
// certificates or, under trust: ca, its CA policy; MIC against the
// message's transmissions) and settles the
// message. A duplicate MDN of a settled message is answered 200 and
// changes nothing.
func (in mdnIntake) ReceiveMDN(ctx context.Context, partner *partners.Partner, h http.Header, body []byte) as2.MDNVerdict {
	s := in.s
	if s.sending == nil {
		return as2.MDNVerdict{Status: http.StatusBadRequest, Reason: "this gateway sends no messages"}
	}
	parsed, err := mdn.ParseHTTP(h, body)
	if err != nil || parsed == nil {
		return as2.MDNVerdict{Status: http.StatusBadRequest, Reason: "the body is no readable MDN"}
	}
	orig := parsed.Report.OriginalMessageID
	m, err := s.sending.store.FindByMessageID(ctx, partner.ID, orig)
	if err != nil && !strings.HasPrefix(orig, "<") {
		m, err = s.sending.store.FindByMessageID(ctx, partner.ID, "<"+orig+">")
	}
	switch {
	case errors.Is(err, outbound.ErrNotFound):
		return as2.MDNVerdict{Status: http.StatusNotFound, Reason: "no message of ours to you has this Original-Message-ID"}
	case err != nil:
		s.Log.Error("async MDN: looking up the message", "partner", partner.ID, "original_message_id", orig, "err", err)
		return as2.MDNVerdict{Status: http.StatusServiceUnavailable, Reason: "the gateway cannot take the MDN now"}
	case m.Protocol != outbound.AS2:
		return as2.MDNVerdict{Status: http.StatusNotFound, Reason: "no AS2 message of ours to you has this Original-Message-ID"}
	}
	delivered, reason, ev, err := s.sending.as2.VerifyAsyncMDN(ctx, m, h, body)
	if err != nil {
		s.Log.Warn("async MDN refused", "partner", partner.ID, "message_id", m.MessageID, "id", m.ID, "err", err)
		s.auditMDN(ctx, m, "rejected", "", err.Error())
		return as2.MDNVerdict{Status: http.StatusForbidden, Reason: "the MDN does not verify for this message"}
	}
	settled, changed, err := s.sending.store.Settle(ctx, partner.ID, m.MessageID, delivered, reason, ev)
	if err != nil {
		s.Log.Error("async MDN: settling the message", "partner", partner.ID, "message_id", m.MessageID, "err", err)
		return as2.MDNVerdict{Status: http.StatusServiceUnavailable, Reason: "the gateway cannot take the MDN now"}
	}
	disp := ""
	if ev != nil {
		disp = ev.Disposition
	}
	if changed {
		s.auditMDN(ctx, settled, string(settled.State), disp, reason)
	} else {
		s.auditMDN(ctx, settled, "duplicate", disp, "")
	}
	return as2.MDNVerdict{Status: http.StatusOK}
}

// auditMDN records what an asynchronous MDN did to an outbound message.
func (s *Server) auditMDN(ctx context.Context, m outbound.Message, decision, disposition, detail string) {
	if s.Pipeline.Audit == nil {
		return
	}
	r := audit.Record{Time: time.Now(), Step: audit.StepSend, Partner: m.Partner, Protocol: string(m.Protocol),
		MessageID: m.MessageID, Decision: decision, Disposition: disposition, Error: detail, PayloadSHA256: m.SHA256}
	if err := s.Pipeline.Audit.Write(ctx, r); err != nil {
		s.Log.Error("audit of an async MDN failed", "message_id", m.MessageID, "err", err)
	}
}

package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"os"
	"strings"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/certs"
	"github.com/edigateway/gateway/internal/console"
	"github.com/edigateway/gateway/partners"
)

// consoleHandler is the operator console (package console) over this
// server's store, partners, quarantine and pipeline.
func (s *Server) consoleHandler() (*console.Console, error) {
	src := console.Source{
		Ledger:        s.Backend,
		Outbox:        s.Backend.Outbox(),
		QuarantineDir: s.Config.QuarantineDir,
		Record:        s.Pipeline.Audit.Write,
		Partners: func() (*partners.Directory, []certs.Cert, time.Duration) {
			snap := s.Current()
			return snap.Partners, snap.Certificates, snap.CertWarning
		},
		Release: s.ReleaseQuarantined,
		// "Retry now" wakes the async MDN dispatcher (set by
		// mountProtocols before the admin handler is built).
		WakeOutbox: func() {
			if s.notify != nil {
				s.notify()
			}
		},
		// Resend and Cancel wake the outbound Sender (wakeSender is set
		// where the Sender is built).
		Outbound: s.outboundStore(),
		Notify: func() {
			if s.wakeSender != nil {
				s.wakeSender()
			}
		},
	}
	if r, ok := s.Backend.AuditSink().(audit.Reader); ok {
		src.Audit = r
	} else {
		return nil, errors.New("server: console: the store's audit cannot be read")
	}
	if cr, ok := s.Backend.(dedup.ClaimReader); ok {
		src.Claims = cr
	}
	if s.table != nil {
		src.Table = s.table
	}
	for _, r := range s.Config.Routes() {
		if r.Type == "dir" && r.Dir.Inbox != "" {
			src.InboxDirs = append(src.InboxDirs, r.Dir.Inbox)
		}
	}
	c, err := console.New(src, s.Config.Admin.Token, s.Log)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// releaseKeyTag versions the transport key a release is processed under.
const releaseKeyTag = "gateway/console-release/v1"

// ReleaseQuarantined processes a quarantined item (one payload, or all
// payloads of a message that drifted on its id, together as one message)
// once through the pipeline and the configured handler, as a new version of what it clashed
// with (on_drift: accept semantics):
//
//   - The release runs under a transport key of its own, derived from the
//     refused delivery's key and the payload's hash, claimed in the store
//     like any delivery: a second release (a second click, another
//     gateway of the fleet, a retry after a crash) finds it accepted and
//     is answered as a duplicate without running the handler again; two
//     at once find it in flight.
//   - An interchange the payload carries is claimed over the accepted
//     one (Supersede), so that the ledger holds the released payload and a
//     resend of it under a new message id is a duplicate interchange.
//   - When the clash was on the message id (a resend under the same id
//     with another payload), the partner's transport key is moved to the
//     released message's hash (exchange.PayloadSHA256 of its payloads),
//     keeping the reply stored with it, so that a resend of the released
//     message is answered as a duplicate.
//
// The release is audited (StepOperator, decision "released", with the
// actor), then the files move to <quarantine_dir>/.released/<partner>/.
func (s *Server) ReleaseQuarantined(ctx context.Context, it QuarantineItem, actor string) (ReleaseResult, error) {
	s.admin.releaseMu.Lock()
	defer s.admin.releaseMu.Unlock()
	var res console.ReleaseResult
	// A release that waited for another one (a double click) finds the
	// item moved: it was released (or discarded) already.
	if _, err := os.Stat(strings.TrimSuffix(it.Path, ".payload") + ".json"); errors.Is(err, os.ErrNotExist) {
		return res, fmt.Errorf("server: release %s: %w", it.ID, console.ErrItemGone)
	}
	// The files are the ones described: each one's bytes hash to its
	// recorded hash, and together they hash to the item's hash (for a
	// message's payloads, exchange.PayloadSHA256 over theirs).
	pls := it.Payloads
	if len(pls) == 0 {
		pls = []console.ItemPayload{{SHA256: it.PayloadSHA256, ContentType: it.ContentType, Filename: it.Filename, Path: it.Path}}
	}
	var payloads []exchange.Payload
	for i, ip := range pls {
		f, err := os.Open(ip.Path)
		if err != nil {
			return res, fmt.Errorf("server: release: %w", err)
		}
		h := sha256.New()
		n, err := io.Copy(h, f)
		f.Close()
		if err != nil {
			return res, fmt.Errorf("server: release: read payload %d: %w", i+1, err)
		}
		if sum := hex.EncodeToString(h.Sum(nil)); sum != ip.SHA256 {
			return res, &console.RefusedError{Reason: fmt.Sprintf("payload file %d's SHA-256 %s is not the quarantined %s (the file changed)", i+1, sum, ip.SHA256)}
		}
		payloads = append(payloads, exchange.NewPayload(exchange.Payload{ContentType: ip.ContentType, Filename: ip.Filename,
			Size: n, SHA256: ip.SHA256}, exchange.FileBody(ip.Path)))
	}
	msgHash := exchange.PayloadSHA256(&exchange.Message{Payloads: payloads})
	if msgHash != it.PayloadSHA256 {
		return res, &console.RefusedError{Reason: fmt.Sprintf("the payload files' SHA-256 %s is not the quarantined %s (the files changed)", msgHash, it.PayloadSHA256)}
	}
	// The refused delivery's transport key, from the audit.
	partnerKey, err := s.quarantinedKey(ctx, it)
	if err != nil {
		return res, err
	}
	key := dedup.HashFields(releaseKeyTag, string(partnerKey), it.PayloadSHA256)
	res.Key = string(key)
	m := &exchange.Message{Partner: it.Partner, Protocol: exchange.Protocol(it.Protocol), MessageID: it.MessageID,
		Received: time.Now().UTC(), TransportKey: key,
		Headers:  textproto.MIMEHeader{"X-Gateway-Released-By": {actor}, "X-Gateway-Released-From": {string(partnerKey)}},
		Payloads: payloads}
	rr := &releaseReplies{}
	reply := s.Pipeline.Process(ctx, exchange.Inbound{Message: m, Replies: rr, OnDrift: exchange.DriftAccept})
	switch {
	case rr.duplicate:
		res.Detail = "released before; not processed again"
	case reply.Disposition == releasedDisposition:
		res.HandlerRan = true
		res.Detail = "processed by the handler"
	default:
		return res, fmt.Errorf("server: release: not processed: %s (%s)", reply.Disposition, strings.TrimSpace(string(reply.Body)))
	}
	if strings.HasPrefix(it.What, "message id ") {
		if err := s.moveTransportKey(ctx, partnerKey, msgHash); err != nil {
			return res, err
		}
	}
	decision := "released"
	if !res.HandlerRan {
		decision = "released-again"
	}
	if err := s.Pipeline.Audit.Write(ctx, audit.Record{Time: time.Now().UTC(), Step: audit.StepOperator, Partner: it.Partner,
		Protocol: it.Protocol, MessageID: it.MessageID, Key: string(partnerKey), Reference: it.Reference,
		PayloadSHA256: it.PayloadSHA256, Decision: decision, Disposition: "release key " + string(key), Actor: actor}); err != nil {
		return res, fmt.Errorf("server: release: audit: %w", err)
	}
	if err := console.MoveItem(s.Config.QuarantineDir, ".released", it); err != nil {
		return res, fmt.Errorf("server: release: %w", err)
	}
	s.Log.Info("quarantined payload released", "partner", it.Partner, "message_id", it.MessageID, "actor", actor,
		"handler_ran", res.HandlerRan, "release_key", string(key))
	return res, nil
}

// quarantinedKey finds the transport key of the delivery whose payload was
// quarantined: its audit records name the message id, and the file name
// starts with the key's first 16 hex digits.
func (s *Server) quarantinedKey(ctx context.Context, it console.QuarantineItem) (dedup.Key, error) {
	r, ok := s.Backend.AuditSink().(audit.Reader)
	if !ok {
		return "", errors.New("server: release: the store's audit cannot be read")
	}
	recs, err := r.Query(ctx, audit.Query{Partner: it.Partner, MessageID: it.MessageID, Limit: 10000})
	if err != nil {
		return "", fmt.Errorf("server: release: read audit: %w", err)
	}
	_, base, _ := console.ParseItemID(it.ID)
	k16, _, _ := strings.Cut(base, "-")
	for _, rec := range recs {
		if rec.Decision == "quarantined" && strings.HasPrefix(rec.Key, k16) && dedup.Key(rec.Key).Valid() {
			return dedup.Key(rec.Key), nil
		}
	}
	return "", fmt.Errorf("server: release: no audit record of the quarantined delivery %s of %s", it.MessageID, it.Partner)
}

// moveTransportKey makes an accepted transport key carry payload hash sum,
// keeping its stored reply: a resend of the released payload under the
// same message id is then a duplicate, not drift.
func (s *Server) moveTransportKey(ctx context.Context, key dedup.Key, sum string) error {
	d, err := s.Backend.Claim(ctx, dedup.ClaimRequest{Key: key, PayloadSHA256: sum})
	if err != nil {
		return fmt.Errorf("server: release: claim %s: %w", key, err)
	}
	switch d.Outcome {
	case dedup.Claimed:
		// Nothing accepted under the key (purged): leave it free.
		return s.Backend.Abandon(ctx, key, d.Token)
	case dedup.InFlight:
		return &console.RefusedError{Reason: fmt.Sprintf("the partner's message is being processed right now; release again in %s", d.RetryAfter)}
	}
	if d.PayloadSHA256 == sum {
		return nil
	}
	d2, err := s.Backend.Claim(ctx, dedup.ClaimRequest{Key: key, PayloadSHA256: sum, Window: time.Nanosecond})
	if err != nil {
		return fmt.Errorf("server: release: reclaim %s: %w", key, err)
	}
	if d2.Outcome != dedup.Claimed {
		return &console.RefusedError{Reason: "the partner's message is being processed right now; release again"}
	}
	if err := s.Backend.Accept(ctx, key, d2.Token, d.Reply); err != nil {
		return fmt.Errorf("server: release: accept %s: %w", key, err)
	}
	return nil
}

const releasedDisposition = "released"

// releaseReplies are the pipeline's replies to a release: nobody receives
// them; the accepted one is stored under the release key.
type releaseReplies struct{ duplicate bool }

func (r *releaseReplies) Accepted(ctx context.Context) (exchange.Reply, error) {
	return exchange.Reply{Status: http.StatusOK, Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
		Body: []byte("released from the quarantine by an operator and processed\n"), Disposition: releasedDisposition}, nil
}

func (r *releaseReplies) Duplicate(ctx context.Context, stored exchange.Reply, d dedup.Decision) (exchange.Reply, error) {
	r.duplicate = true
	return stored, nil
}

func (r *releaseReplies) DuplicateInterchange(ctx context.Context, dups []exchange.InterchangeDuplicate) (exchange.Reply, error) {
	r.duplicate = true
	return r.Accepted(ctx)
}

func (r *releaseReplies) Failed(ctx context.Context, f *exchange.Failure) (exchange.Reply, error) {
	return exchange.Reply{Status: http.StatusConflict, Body: []byte(f.Error()), Disposition: "release-" + f.Kind.String()}, nil
}

package exchange

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/internal/envelope"
)

// InterchangeDuplicate describes an interchange that was already accepted
// under another transport id.
type InterchangeDuplicate struct {
	Interchange dedup.Interchange
	FirstSeen   time.Time
	Retries     int
}

// InterchangeDuplicateReplies is implemented by protocols whose positive
// reply to a message whose every interchange was already accepted (a resend
// under a new transport id) differs from Accepted, such as AS2's
// processed/warning: duplicate-document MDN. Protocols without it answer
// with Accepted.
type InterchangeDuplicateReplies interface {
	DuplicateInterchange(ctx context.Context, dups []InterchangeDuplicate) (Reply, error)
}

// payloadInterchange ties a business envelope to the payload it came from.
type payloadInterchange struct {
	payload int
	ic      dedup.Interchange
	hash    string
}

// extractInterchanges finds the business envelope of each payload, whatever
// its size: the payload is read once more, as a stream from memory or its
// spool file, in memory that does not depend on its size. A damaged
// envelope is a *damagedEnvelope: the message is refused rather than
// processed without its business key. Any other error is ours (a payload
// that cannot be read back).
func (p *Pipeline) extractInterchanges(m *Message) ([]payloadInterchange, error) {
	var out []payloadInterchange
	for i, pl := range m.Payloads {
		env, err := extractPayload(pl)
		if err == envelope.ErrNoEnvelope {
			continue
		}
		if err != nil && !errors.Is(err, envelope.ErrDamaged) {
			return nil, fmt.Errorf("exchange: read payload %d: %w", i+1, err)
		}
		if err != nil {
			return nil, &damagedEnvelope{reason: fmt.Sprintf("payload %d: %s", i+1, envelope.Reason(err)),
				err: fmt.Errorf("payload %d: %w", i+1, err)}
		}
		ic := dedup.Interchange{Key: env.Key(m.Partner), Partner: m.Partner, Standard: env.Standard,
			Sender: joinQualified(env.SenderQualifier, env.Sender), Recipient: joinQualified(env.RecipientQualifier, env.Recipient),
			Reference: env.Reference, Date: env.Date, Type: env.Type}
		out = append(out, payloadInterchange{payload: i, ic: ic, hash: pl.SHA256})
	}
	return out, nil
}

func joinQualified(q, id string) string {
	if q == "" {
		return id
	}
	return q + ":" + id
}

// heldInterchange is an interchange claim this delivery holds.
type heldInterchange struct {
	key   dedup.Key
	token dedup.Token
}

// claimInterchanges claims the business key of every payload. It returns the
// claims held, the duplicates found (their payloads are moved out of
// m.Payloads), or a final reply when the delivery cannot go on (in flight
// elsewhere, drift, store down); in that case every claim taken here has
// been released and the caller must abandon the transport claim.
//
// early holds the ledger's decisions for ics[:len(early)] when the claims
// were taken in the transport claim's transaction (ledgerClaimsIn; the
// decision records of those claimed are written already): they are acted
// on as if claimed here.
func (p *Pipeline) claimInterchanges(ctx context.Context, in Inbound, ics []payloadInterchange, early []dedup.Decision,
	rec audit.Record, lg *slog.Logger) ([]heldInterchange, []InterchangeDuplicate, *Reply) {
	m := in.Message
	var held []heldInterchange
	var dups []InterchangeDuplicate
	release := func() {
		for _, h := range held {
			p.abandonInterchange(ctx, h.key, h.token, lg)
		}
	}
	dupPayload := map[int]bool{}
	seen := map[dedup.Key]string{} // interchange key → payload hash, in this message
	for i, pic := range ics {
		r := interchangeRecord(rec, pic)
		if first, ok := seen[pic.ic.Key]; ok {
			// The message carries this interchange twice. Claiming it again
			// would find this delivery's own claim in flight.
			if first == pic.hash {
				dupPayload[pic.payload] = true
				continue
			}
			release()
			why := fmt.Sprintf("payload %d: %s appears twice in the message with different content",
				pic.payload+1, interchangeName(pic.ic.Standard, pic.ic.Reference))
			reply := p.refuseDamaged(ctx, in, r, lg, &damagedEnvelope{reason: why, err: errors.New(why)}, pic.ic.Reference)
			return nil, nil, &reply
		}
		seen[pic.ic.Key] = pic.hash
		claim := ledgerClaim(in, pic)
		var d dedup.Decision
		var decided audit.Sink // where the decision of a claimed interchange is still to be recorded
		if i < len(early) {
			d = early[i]
		} else {
			p.retryPendingAbandon(ctx, interchangeClaim, pic.ic.Key)
			var err error
			if d, decided, err = p.claimInterchange(ctx, claim, r); err != nil {
				release()
				reply := p.unavailable(ctx, r, err)
				return nil, nil, &reply
			}
		}
		switch d.Outcome {
		case dedup.Claimed:
			decision := interchangeDecision(d)
			if d.Reused {
				lg.Warn("interchange reference reused after its dedup window; processed as new", "reference", pic.ic.Reference, "standard", pic.ic.Standard)
			}
			held = append(held, heldInterchange{pic.ic.Key, d.Token})
			keeperFrom(ctx).hold(pic.ic.Key, d.Token)
			p.auditBestEffortTo(ctx, decided, r, audit.StepDecision, decision, "", nil)
		case dedup.InFlight:
			release()
			p.Stats.InFlight.Add(1)
			p.auditBestEffort(ctx, r, audit.StepDecision, "in-flight-interchange", "", nil)
			reply := retryLater(p.inFlightRetryAfter(d.RetryAfter, p.heldFor(d)), "interchange in flight")
			return nil, nil, &reply
		case dedup.Duplicate:
			if d.PayloadSHA256 != "" && d.PayloadSHA256 != pic.hash {
				info := driftInfo{what: interchangeName(pic.ic.Standard, pic.ic.Reference),
					stored: d.PayloadSHA256, got: pic.hash, firstSeen: d.FirstSeen, reference: pic.ic.Reference}
				if in.OnDrift == DriftAccept {
					p.driftAudit(ctx, r, lg, info, "drift-accepted")
					claim.Supersede = true
					d2, err := p.Ledger.ClaimInterchange(ctx, claim)
					if err != nil || d2.Outcome != dedup.Claimed {
						release()
						if err != nil {
							reply := p.unavailable(ctx, r, err)
							return nil, nil, &reply
						}
						reply := retryLater(p.inFlightRetryAfter(d2.RetryAfter, p.heldFor(d2)), "interchange in flight")
						return nil, nil, &reply
					}
					held = append(held, heldInterchange{pic.ic.Key, d2.Token})
					keeperFrom(ctx).hold(pic.ic.Key, d2.Token)
					continue
				}
				release()
				reply := p.driftReply(ctx, in, r, lg, info, m.Payloads[pic.payload:pic.payload+1])
				return nil, nil, &reply
			}
			p.Stats.Duplicates.Add(1)
			lg.Debug("interchange already accepted under another transport id; not processed again", "decision", "duplicate-interchange",
				"reference", pic.ic.Reference, "standard", pic.ic.Standard, "first_seen", d.FirstSeen, "retries", d.Retries)
			p.auditBestEffort(ctx, r, audit.StepDecision, "duplicate-interchange", "", nil)
			dupPayload[pic.payload] = true
			dups = append(dups, InterchangeDuplicate{Interchange: pic.ic, FirstSeen: d.FirstSeen, Retries: d.Retries})
		default:
			release()
			reply := p.unavailable(ctx, r, fmt.Errorf("exchange: ledger returned outcome %v", d.Outcome))
			return nil, nil, &reply
		}
	}
	if len(dupPayload) > 0 {
		var keep []Payload
		for i, pl := range m.Payloads {
			if dupPayload[i] {
				m.DuplicatePayloads = append(m.DuplicatePayloads, pl)
			} else {
				keep = append(keep, pl)
			}
		}
		m.Payloads = keep
	}
	return held, dups, nil
}

// ledgerClaim is the ledger claim of one payload's interchange.
func ledgerClaim(in Inbound, pic payloadInterchange) dedup.InterchangeClaim {
	window := in.Window
	if pic.ic.Standard == envelope.StandardPeppolSBDH {
		window = 0 // PEPPOL instance identifiers are unique forever
	}
	return dedup.InterchangeClaim{Interchange: pic.ic, PayloadSHA256: pic.hash, TransportKey: in.Message.TransportKey,
		MessageID: in.Message.MessageID, Window: window}
}

// interchangeRecord is rec for the records of one payload's interchange.
func interchangeRecord(rec audit.Record, pic payloadInterchange) audit.Record {
	rec.InterchangeKey, rec.Reference, rec.PayloadSHA256 = string(pic.ic.Key), pic.ic.Reference, pic.hash
	return rec
}

// driftInfo describes a key seen again with another payload.
type driftInfo struct {
	what        string
	reference   string
	stored, got string
	firstSeen   time.Time
}

// reason is the drift text of both protocols' negative replies: what
// clashed (the message id, or the standard and interchange reference), when
// it was accepted and both hashes.
func (d driftInfo) reason() string {
	return fmt.Sprintf("%s was accepted on %s with payload SHA-256 %s; this delivery has payload SHA-256 %s",
		d.what, d.firstSeen.UTC().Format(time.RFC3339), d.stored, d.got)
}

func (d driftInfo) err() error { return errors.New(d.reason()) }

// interchangeName names an interchange for partners: "EDIFACT interchange
// reference REF00042".
func interchangeName(standard, reference string) string {
	name := standard
	switch standard {
	case envelope.StandardEDIFACT:
		name = "EDIFACT"
	case envelope.StandardX12:
		name = "X12"
	case envelope.StandardUBL:
		name = "UBL"
	case envelope.StandardPeppolSBDH:
		name = "PEPPOL SBDH"
	}
	return fmt.Sprintf("%s interchange reference %s", name, reference)
}

// damagedEnvelope is a payload refused for its business envelope: reason is
// for the partner (no parser error text), err for the log and audit.
type damagedEnvelope struct {
	reason string
	err    error
}

func (d *damagedEnvelope) Error() string { return d.err.Error() }
func (d *damagedEnvelope) Unwrap() error { return d.err }

// DamagedText is what both protocols tell the partner of a message refused
// for a damaged business envelope, from the Failure's Reason: AS2 in the
// negative MDN's text, AS4 in eb:Description and eb:ErrorDetail. For
// example `its business envelope is damaged: payload 1: EDIFACT: UNZ 0020
// "124" does not match UNB 0020 "123"`.
func DamagedText(reason string) string { return "its business envelope is damaged: " + reason }

func damagedReason(err error) string {
	var d *damagedEnvelope
	if errors.As(err, &d) {
		return d.reason
	}
	return "the business envelope is damaged"
}

func (p *Pipeline) driftAudit(ctx context.Context, rec audit.Record, lg *slog.Logger, info driftInfo, decision string) {
	p.Stats.Drift.Add(1)
	lg.Error("payload drift: a key seen before arrived with a different payload", "decision", decision, "incident", rec.Incident,
		"what", info.what, "stored_sha256", info.stored, "payload_sha256", info.got, "first_seen", info.firstSeen)
	p.auditBestEffort(ctx, rec, audit.StepDecision, decision, "", info.err())
}

// driftReply handles drift under the reject and quarantine policies: the
// partner is told the message was not processed; under quarantine the
// payloads are first kept for an operator, as one item (all payloads of a
// message that drifted on its id; the one payload of a drifted interchange).
func (p *Pipeline) driftReply(ctx context.Context, in Inbound, rec audit.Record, lg *slog.Logger, info driftInfo, pls []Payload) Reply {
	kind, decision := Drift, "drift"
	reason := info.reason()
	if in.OnDrift == DriftQuarantine {
		path, err := p.quarantine(in.Message, pls, info)
		if err != nil {
			lg.Error("quarantine failed", "err", err)
			p.driftAudit(ctx, rec, lg, info, "drift")
			return p.unavailable(ctx, rec, err)
		}
		kind, decision = Quarantined, "quarantined"
		reason += "; the payload was quarantined for an operator and not processed"
		lg.Error("drifted payload quarantined", "path", path)
	}
	rec.Incident = NewIncident()
	p.driftAudit(ctx, rec, lg, info, decision)
	return p.failed(ctx, in, rec, lg, &Failure{Kind: kind, Err: errors.New(reason), Reason: reason, StoredSHA256: info.stored,
		PayloadSHA256: info.got, FirstSeen: info.firstSeen, Reference: info.reference, Incident: rec.Incident})
}

// quarantine keeps drifted payloads and a JSON description beside them
// under <Quarantine>/<partner>/: <base>.payload, then <base>.2.payload ...
// for a message's further payloads; the description lists them in order
// with their hashes, and payload_sha256 is info.got (for a message, the
// hash over its payloads' hashes, PayloadSHA256).
func (p *Pipeline) quarantine(m *Message, pls []Payload, info driftInfo) (string, error) {
	if p.Quarantine == "" {
		return "", errors.New("exchange: on_drift quarantine needs a quarantine directory")
	}
	if len(pls) == 0 {
		pls = []Payload{{}} // an empty message: one empty file
	}
	dir := filepath.Join(p.Quarantine, m.Partner)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", fmt.Errorf("exchange: quarantine: %w", err)
	}
	// One item per transport key and payload hash: a retransmission of the
	// same drifted message finds its payloads already kept.
	base := fmt.Sprintf("%s-%s", string(m.TransportKey)[:min(16, len(m.TransportKey))], info.got[:min(16, len(info.got))])
	path := filepath.Join(dir, base+".payload")
	if _, err := os.Stat(base2json(path)); err == nil {
		return path, nil
	}
	type listed struct {
		File        string `json:"file"`
		SHA256      string `json:"sha256"`
		ContentType string `json:"content_type"`
		Filename    string `json:"filename"`
	}
	var list []listed
	for i, pl := range pls {
		name := quarantineFile(base, i)
		fp := filepath.Join(dir, name)
		os.Remove(fp) // payloads without their description are a write cut short
		r, err := pl.Open()
		if err != nil {
			return "", fmt.Errorf("exchange: quarantine: %w", err)
		}
		err = writeFileSync(fp, r)
		r.Close()
		if err != nil {
			return "", fmt.Errorf("exchange: quarantine: %w", err)
		}
		list = append(list, listed{File: name, SHA256: pl.SHA256, ContentType: pl.ContentType, Filename: pl.Filename})
	}
	meta, _ := json.MarshalIndent(map[string]any{
		"partner": m.Partner, "protocol": m.Protocol, "message_id": m.MessageID, "what": info.what,
		"reference": info.reference, "stored_sha256": info.stored, "payload_sha256": info.got,
		"first_seen": info.firstSeen.UTC(), "quarantined": p.now().UTC(), "content_type": pls[0].ContentType, "filename": pls[0].Filename,
		"payloads": list,
	}, "", "  ")
	if err := writeFileSync(base2json(path), bytes.NewReader(meta)); err != nil {
		return "", fmt.Errorf("exchange: quarantine: %w", err)
	}
	return path, nil
}

// quarantineFile names payload i (from 0) of a quarantine item (the
// console's ItemPayloadFile reads the same names).
func quarantineFile(base string, i int) string {
	if i == 0 {
		return base + ".payload"
	}
	return fmt.Sprintf("%s.%d.payload", base, i+1)
}

func base2json(payloadPath string) string {
	return payloadPath[:len(payloadPath)-len(".payload")] + ".json"
}

func writeFileSync(path string, r io.Reader) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// extractPayload reads the business envelope of a payload from its body.
// An error that is neither envelope.ErrNoEnvelope nor a damaged envelope
// means the payload could not be read.
func extractPayload(pl Payload) (*envelope.Interchange, error) {
	r, err := pl.Open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return envelope.ExtractTypedReader(pl.ContentType, r)
}

// claimInterchange claims an interchange in the ledger. With an atomic
// store (AuditParts) the store's decision record of a claimed interchange
// is written in the claim's transaction; sink is then where the decision is
// still to be recorded (the other sinks), else it is the whole Audit.
func (p *Pipeline) claimInterchange(ctx context.Context, claim dedup.InterchangeClaim, r audit.Record) (dedup.Decision, audit.Sink, error) {
	a, parts := p.atomicStore()
	if a == nil {
		d, err := p.Ledger.ClaimInterchange(ctx, claim)
		return d, p.Audit, err
	}
	var d dedup.Decision
	err := a.Atomically(ctx, func(ctx context.Context) error {
		var err error
		if d, err = p.Ledger.ClaimInterchange(ctx, claim); err != nil || d.Outcome != dedup.Claimed {
			return err
		}
		return p.auditTo(ctx, parts.Store, r, audit.StepDecision, interchangeDecision(d), "", nil)
	})
	return d, parts.Other, err
}

func interchangeDecision(d dedup.Decision) string {
	if d.Reused {
		return "reused-interchange"
	}
	return "new-interchange"
}

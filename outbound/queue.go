package outbound

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/edigateway/gateway/audit"
)

// Errors of Queue.Submit (wrapped with the partner and protocol): the HTTP
// submission API answers them 404, 422 and 400.
var (
	// ErrUnknownPartner: no partner with that id in the directory.
	ErrUnknownPartner = errors.New("outbound: unknown partner")
	// ErrNoSending: the partner has no sending set up for the protocol
	// asked (or none at all, or both AS2 and AS4 and none was asked).
	ErrNoSending = errors.New("outbound: partner has no sending set up for the protocol")
	// ErrInvalid: the submission lacks a partner or a payload, names a
	// protocol other than as2 and as4, has properties ValidateProperties
	// refuses, or has properties for AS2 (which has none).
	ErrInvalid = errors.New("outbound: invalid submission")
)

// Queue turns submissions into queued messages: the Go API of sending (the
// HTTP submission API, the pickup directories and `gateway submit` call it).
type Queue struct {
	Store Store
	// NewMessageID returns a fresh transport id for a message to partner
	// (an AS2 Message-ID with angle brackets, an eb:MessageId without);
	// nil: DefaultMessageID.
	NewMessageID func(p Protocol, partner string) (string, error)
	// Resolve checks that partner exists (ErrUnknownPartner) and sends
	// with protocol p, and returns the protocol to send with: an empty p
	// picks the one the partner has set up (ErrNoSending when none, or
	// when both are and none was asked). Nil: every partner is accepted
	// and the submission must name its protocol.
	Resolve func(partner string, p Protocol) (Protocol, error)
	// Notify wakes the Sender after a new message was queued (nil: the
	// Sender finds it on its next poll).
	Notify func()
	Now    func() time.Time
	// Audit receives a StepSubmit record per submission (nil: none).
	Audit audit.Sink
	Log   *slog.Logger
}

// Submit queues s and returns its message, created false when s's
// IdempotencyKey was already queued for the partner (the first message is
// returned and s.Payload is not read). The payload is stored durably
// before Submit returns; an audit failure is logged, not returned (the
// message is queued and will be sent).
func (q *Queue) Submit(ctx context.Context, s Submission) (Message, bool, error) {
	if strings.TrimSpace(s.Partner) == "" {
		return Message{}, false, fmt.Errorf("%w: no partner", ErrInvalid)
	}
	if s.Payload == nil {
		return Message{}, false, fmt.Errorf("%w: no payload for partner %q", ErrInvalid, s.Partner)
	}
	if s.Protocol != "" && s.Protocol != AS2 && s.Protocol != AS4 {
		return Message{}, false, fmt.Errorf("%w: protocol %q (want as2 or as4)", ErrInvalid, s.Protocol)
	}
	if err := ValidateProperties(s.Properties); err != nil {
		return Message{}, false, fmt.Errorf("%w: partner %q: %w", ErrInvalid, s.Partner, err)
	}
	p := s.Protocol
	if q.Resolve != nil {
		var err error
		if p, err = q.Resolve(s.Partner, s.Protocol); err != nil {
			return Message{}, false, fmt.Errorf("outbound: submit to partner %q: %w", s.Partner, err)
		}
	} else if p == "" {
		return Message{}, false, fmt.Errorf("%w: no protocol for partner %q", ErrInvalid, s.Partner)
	}
	if p == AS2 && len(s.Properties) > 0 {
		return Message{}, false, fmt.Errorf("%w: partner %q is sent AS2, which has no part properties (%d given)", ErrInvalid, s.Partner, len(s.Properties))
	}
	now := q.now()
	newMID := q.NewMessageID
	if newMID == nil {
		newMID = DefaultMessageID
	}
	mid, err := newMID(p, s.Partner)
	if err != nil {
		return Message{}, false, fmt.Errorf("outbound: submit to partner %q: new message id: %w", s.Partner, err)
	}
	src := s.Source
	if src == "" {
		src = "api"
	}
	m := Message{ID: NewID(now), Partner: s.Partner, Protocol: p, MessageID: mid, IdempotencyKey: s.IdempotencyKey,
		Source: src, ContentType: s.ContentType, Filename: s.Filename, Subject: s.Subject, Service: s.Service,
		Action: s.Action, ConversationID: s.ConversationID, Properties: slices.Clone(s.Properties)}
	stored, created, err := q.Store.Submit(ctx, m, s.Payload)
	if err != nil {
		return Message{}, false, fmt.Errorf("outbound: submit to partner %q: %w", s.Partner, err)
	}
	decision := "queued"
	if !created {
		decision = "duplicate"
	}
	lg := q.log().With("partner", stored.Partner, "protocol", stored.Protocol, "message_id", stored.MessageID,
		"id", stored.ID, "source", src)
	if created {
		lg.Info("outbound: message queued", "size", stored.Size, "sha256", stored.SHA256)
	} else {
		lg.Info("outbound: submission repeated its idempotency key; the message queued first is kept",
			"idempotency_key", s.IdempotencyKey, "state", stored.State)
	}
	if q.Audit != nil {
		rec := audit.Record{Time: now.UTC(), Step: audit.StepSubmit, Partner: stored.Partner, Protocol: string(stored.Protocol),
			MessageID: stored.MessageID, Decision: decision, PayloadSHA256: stored.SHA256}
		if err := q.Audit.Write(ctx, rec); err != nil {
			lg.Error("outbound: audit of the submission failed", "err", err)
		}
	}
	if created && q.Notify != nil {
		q.Notify()
	}
	return stored, created, nil
}

func (q *Queue) now() time.Time {
	if q.Now != nil {
		return q.Now()
	}
	return time.Now()
}

func (q *Queue) log() *slog.Logger {
	if q.Log != nil {
		return q.Log
	}
	return slog.Default()
}

// DefaultMessageID returns a fresh, random transport id: "<id@edigateway>"
// for AS2 (RFC 4130 wants the angle brackets), "id@edigateway" for AS4.
func DefaultMessageID(p Protocol, partner string) (string, error) {
	id := NewID(time.Now()) + "@edigateway"
	if p == AS2 {
		return "<" + id + ">", nil
	}
	return id, nil
}

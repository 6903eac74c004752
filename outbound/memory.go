package outbound

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"time"
)

// Memory is a Store in process memory. It is NOT durable: the queue and its
// payloads are lost when the process exits, and every payload is held in
// memory whole. Use it for tests, demos and the memory: store.
type Memory struct {
	mu   sync.Mutex
	now  func() time.Time
	rows map[string]*memoryRow
	// byMessageID and byKey index the rows by (partner, transport id) and
	// (partner, idempotency key).
	byMessageID map[partnerKey]string
	byKey       map[partnerKey]string
}

type memoryRow struct {
	m       Message
	payload []byte // never changed once stored: readers share it
}

type partnerKey struct{ partner, key string }

// MemoryOption tunes NewMemory.
type MemoryOption func(*Memory)

// MemoryClock makes the store read time from now instead of time.Now.
func MemoryClock(now func() time.Time) MemoryOption { return func(m *Memory) { m.now = now } }

// NewMemory returns an empty in-memory queue.
func NewMemory(opts ...MemoryOption) *Memory {
	m := &Memory{
		now:         time.Now,
		rows:        map[string]*memoryRow{},
		byMessageID: map[partnerKey]string{},
		byKey:       map[partnerKey]string{},
	}
	for _, o := range opts {
		o(m)
	}
	return m
}

var _ Store = (*Memory)(nil)

// Submit queues msg with its payload, or returns the message already queued
// for msg.Partner under msg.IdempotencyKey.
func (m *Memory) Submit(ctx context.Context, msg Message, payload io.Reader) (Message, bool, error) {
	if err := ctx.Err(); err != nil {
		return Message{}, false, fmt.Errorf("outbound: submit: %w", err)
	}
	switch {
	case msg.ID == "":
		return Message{}, false, fmt.Errorf("outbound: submit: empty message id")
	case msg.MessageID == "":
		return Message{}, false, fmt.Errorf("outbound: submit %s: empty transport message id", msg.ID)
	case msg.Partner == "":
		return Message{}, false, fmt.Errorf("outbound: submit %s: empty partner", msg.ID)
	case msg.Protocol == "":
		return Message{}, false, fmt.Errorf("outbound: submit %s: empty protocol", msg.ID)
	}
	if payload == nil {
		return Message{}, false, fmt.Errorf("outbound: submit %s: nil payload", msg.ID)
	}
	// A known key returns its message without reading the payload.
	m.mu.Lock()
	old, found, err := m.existing(msg)
	m.mu.Unlock()
	if err != nil || found {
		return old, false, err
	}

	// The payload is read without the lock (it may be slow); whoever
	// stores first under a key wins, the others get its message.
	h := sha256.New()
	var buf bytes.Buffer
	if _, err := io.Copy(io.MultiWriter(&buf, h), payload); err != nil {
		return Message{}, false, fmt.Errorf("outbound: submit %s: reading the payload: %w", msg.ID, err)
	}
	if err := ctx.Err(); err != nil {
		return Message{}, false, fmt.Errorf("outbound: submit %s: %w", msg.ID, err)
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if old, found, err := m.existing(msg); err != nil || found {
		return old, false, err
	}
	now := m.now()
	msg = cloneMessage(msg)
	msg.Size, msg.SHA256 = int64(buf.Len()), hex.EncodeToString(h.Sum(nil))
	msg.State, msg.Attempts, msg.NextAttempt = Queued, 0, now
	msg.LastError, msg.Reason = "", ""
	msg.Created, msg.Updated = now, now
	msg.Sent, msg.Evidence = nil, nil
	msg.LeaseToken, msg.LeasedUntil = "", time.Time{}
	m.rows[msg.ID] = &memoryRow{m: msg, payload: buf.Bytes()}
	m.byMessageID[partnerKey{msg.Partner, msg.MessageID}] = msg.ID
	if msg.IdempotencyKey != "" {
		m.byKey[partnerKey{msg.Partner, msg.IdempotencyKey}] = msg.ID
	}
	return cloneMessage(msg), true, nil
}

// existing returns the message queued under msg's idempotency key (found
// true), or an error when msg's id or transport id is taken. The caller
// holds m.mu.
func (m *Memory) existing(msg Message) (Message, bool, error) {
	if msg.IdempotencyKey != "" {
		if id, ok := m.byKey[partnerKey{msg.Partner, msg.IdempotencyKey}]; ok {
			return cloneMessage(m.rows[id].m), true, nil
		}
	}
	if _, ok := m.rows[msg.ID]; ok {
		return Message{}, false, fmt.Errorf("outbound: submit: message %s already exists", msg.ID)
	}
	if id, ok := m.byMessageID[partnerKey{msg.Partner, msg.MessageID}]; ok {
		return Message{}, false, fmt.Errorf("outbound: submit %s: partner %s already has message %s with transport id %s",
			msg.ID, msg.Partner, id, msg.MessageID)
	}
	return Message{}, false, nil
}

// OpenPayload returns a reader of a message's payload.
func (m *Memory) OpenPayload(ctx context.Context, id string) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("outbound: payload of %s: %w", id, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.row(id)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(r.payload)), nil
}

// row returns the row of id. The caller holds m.mu.
func (m *Memory) row(id string) (*memoryRow, error) {
	r, ok := m.rows[id]
	if !ok {
		return nil, fmt.Errorf("outbound: message %s: %w", id, ErrNotFound)
	}
	return r, nil
}

// held returns the row of id leased under token. A message whose lease ran
// out stays held until another worker leases it. The caller holds m.mu.
func (m *Memory) held(id, token string) (*memoryRow, error) {
	r, err := m.row(id)
	if err != nil {
		return nil, err
	}
	if token == "" || r.m.LeaseToken != token {
		return nil, fmt.Errorf("outbound: message %s: %w", id, ErrLeaseLost)
	}
	return r, nil
}

// due reports whether a worker may lease the message at now.
func (msg *Message) due(now time.Time) bool {
	if msg.State != Queued && msg.State != AwaitingMDN {
		return false
	}
	return !msg.NextAttempt.After(now) && (msg.LeaseToken == "" || !msg.LeasedUntil.After(now))
}

// Lease hands out up to limit due messages, oldest NextAttempt first, each
// under its own fresh token.
func (m *Memory) Lease(ctx context.Context, limit int, lease time.Duration) ([]Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("outbound: lease: %w", err)
	}
	if limit <= 0 {
		return nil, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	var due []*memoryRow
	for _, r := range m.rows {
		if r.m.due(now) {
			due = append(due, r)
		}
	}
	sort.Slice(due, func(i, j int) bool {
		a, b := &due[i].m, &due[j].m
		if !a.NextAttempt.Equal(b.NextAttempt) {
			return a.NextAttempt.Before(b.NextAttempt)
		}
		return a.ID < b.ID
	})
	if len(due) > limit {
		due = due[:limit]
	}
	out := make([]Message, 0, len(due))
	for _, r := range due {
		r.m.LeaseToken, r.m.LeasedUntil = NewLeaseToken(), now.Add(lease)
		out = append(out, cloneMessage(r.m))
	}
	return out, nil
}

// update runs f on the row of id leased under token, stamping Updated.
func (m *Memory) update(ctx context.Context, what, id, token string, f func(msg *Message, now time.Time)) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("outbound: %s %s: %w", what, id, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held(id, token)
	if err != nil {
		return fmt.Errorf("outbound: %s: %w", what, err)
	}
	now := m.now()
	f(&r.m, now)
	r.m.Updated = now
	return nil
}

func (msg *Message) unlease() { msg.LeaseToken, msg.LeasedUntil = "", time.Time{} }

// Renew extends the lease held under token to lease from now.
func (m *Memory) Renew(ctx context.Context, id, token string, lease time.Duration) error {
	return m.update(ctx, "renew", id, token, func(msg *Message, now time.Time) {
		msg.LeasedUntil = now.Add(lease)
	})
}

// Release hands the message leased under token back, due at once.
func (m *Memory) Release(ctx context.Context, id, token string) error {
	return m.update(ctx, "release", id, token, func(msg *Message, now time.Time) {
		msg.unlease()
		if msg.NextAttempt.After(now) {
			msg.NextAttempt = now
		}
	})
}

// Posting counts a transmission and records its digest.
func (m *Memory) Posting(ctx context.Context, id, token, digest string) error {
	return m.update(ctx, "posting", id, token, func(msg *Message, _ time.Time) {
		msg.Attempts++
		if digest != "" && !slices.Contains(msg.Sent, digest) {
			msg.Sent = append(msg.Sent, digest)
		}
	})
}

// Retry queues the message again, due at next.
func (m *Memory) Retry(ctx context.Context, id, token string, next time.Time, lastErr string) error {
	return m.update(ctx, "retry", id, token, func(msg *Message, _ time.Time) {
		msg.State, msg.NextAttempt, msg.LastError = Queued, next, lastErr
		msg.unlease()
	})
}

// Awaiting waits for an asynchronous MDN until deadline.
func (m *Memory) Awaiting(ctx context.Context, id, token string, deadline time.Time) error {
	return m.update(ctx, "awaiting", id, token, func(msg *Message, _ time.Time) {
		msg.State, msg.NextAttempt = AwaitingMDN, deadline
		msg.unlease()
	})
}

// Delivered ends the message delivered with ev.
func (m *Memory) Delivered(ctx context.Context, id, token string, ev *Evidence) error {
	return m.update(ctx, "delivered", id, token, func(msg *Message, _ time.Time) {
		msg.State, msg.Reason, msg.Evidence = Delivered, "", cloneEvidence(ev)
		msg.unlease()
	})
}

// Failed ends the message failed with reason and ev.
func (m *Memory) Failed(ctx context.Context, id, token, reason string, ev *Evidence) error {
	return m.update(ctx, "failed", id, token, func(msg *Message, _ time.Time) {
		msg.State, msg.Reason, msg.Evidence = Failed, reason, cloneEvidence(ev)
		msg.unlease()
	})
}

// Settle ends the partner's message messageID by an asynchronous MDN,
// whatever its lease, unless it is final already.
func (m *Memory) Settle(ctx context.Context, partner, messageID string, delivered bool, reason string, ev *Evidence) (Message, bool, error) {
	if err := ctx.Err(); err != nil {
		return Message{}, false, fmt.Errorf("outbound: settle %s: %w", messageID, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	id, ok := m.byMessageID[partnerKey{partner, messageID}]
	if !ok {
		return Message{}, false, fmt.Errorf("outbound: settle: partner %s has no message %s: %w", partner, messageID, ErrNotFound)
	}
	msg := &m.rows[id].m
	if msg.State.Final() {
		return cloneMessage(*msg), false, nil
	}
	msg.State, msg.Reason = Failed, reason
	if delivered {
		msg.State = Delivered
	}
	msg.Evidence = cloneEvidence(ev)
	msg.unlease()
	msg.Updated = m.now()
	return cloneMessage(*msg), true, nil
}

// Get returns a message.
func (m *Memory) Get(ctx context.Context, id string) (Message, error) {
	if err := ctx.Err(); err != nil {
		return Message{}, fmt.Errorf("outbound: get %s: %w", id, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.row(id)
	if err != nil {
		return Message{}, err
	}
	return cloneMessage(r.m), nil
}

// FindByMessageID returns the partner's message with transport id
// messageID.
func (m *Memory) FindByMessageID(ctx context.Context, partner, messageID string) (Message, error) {
	if err := ctx.Err(); err != nil {
		return Message{}, fmt.Errorf("outbound: find %s: %w", messageID, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	id, ok := m.byMessageID[partnerKey{partner, messageID}]
	if !ok {
		return Message{}, fmt.Errorf("outbound: partner %s has no message %s: %w", partner, messageID, ErrNotFound)
	}
	return cloneMessage(m.rows[id].m), nil
}

// List returns the messages matching f, newest first.
func (m *Memory) List(ctx context.Context, f Filter) ([]Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("outbound: list: %w", err)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Message
	for _, r := range m.rows {
		msg := &r.m
		if (f.Partner != "" && msg.Partner != f.Partner) ||
			(len(f.States) > 0 && !slices.Contains(f.States, msg.State)) ||
			!f.admits(msg.Created, msg.ID) {
			continue
		}
		out = append(out, cloneMessage(*msg))
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.After(out[j].Created)
		}
		return out[i].ID > out[j].ID
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Stats returns the figures of every partner (and protocol) with messages,
// by partner.
func (m *Memory) Stats(ctx context.Context) ([]Stats, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("outbound: stats: %w", err)
	}
	type pp struct {
		partner  string
		protocol Protocol
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	by := map[pp]*Stats{}
	for _, r := range m.rows {
		msg := &r.m
		s := by[pp{msg.Partner, msg.Protocol}]
		if s == nil {
			s = &Stats{Partner: msg.Partner, Protocol: msg.Protocol}
			by[pp{msg.Partner, msg.Protocol}] = s
		}
		switch msg.State {
		case Queued:
			s.Queued++
			if s.OldestQueued.IsZero() || msg.Created.Before(s.OldestQueued) {
				s.OldestQueued = msg.Created
			}
		case AwaitingMDN:
			s.Awaiting++
		case Delivered:
			s.Delivered++
		case Failed:
			s.Failed++
		case Cancelled:
			s.Cancelled++
		}
	}
	out := make([]Stats, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Partner != out[j].Partner {
			return out[i].Partner < out[j].Partner
		}
		return out[i].Protocol < out[j].Protocol
	})
	return out, nil
}

// Cancel ends a message that is not final, whatever its lease.
func (m *Memory) Cancel(ctx context.Context, id, reason string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("outbound: cancel %s: %w", id, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.row(id)
	if err != nil {
		return fmt.Errorf("outbound: cancel: %w", err)
	}
	if r.m.State.Final() {
		return fmt.Errorf("outbound: cancel %s (%s): %w", id, r.m.State, ErrFinal)
	}
	r.m.State, r.m.Reason = Cancelled, reason
	r.m.unlease()
	r.m.Updated = m.now()
	return nil
}

// Resend queues a failed or cancelled message again, due now, under its
// transport id.
func (m *Memory) Resend(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("outbound: resend %s: %w", id, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.row(id)
	if err != nil {
		return fmt.Errorf("outbound: resend: %w", err)
	}
	switch r.m.State {
	case Failed, Cancelled:
	case Delivered:
		return fmt.Errorf("outbound: resend %s (delivered): %w", id, ErrFinal)
	default:
		return fmt.Errorf("outbound: resend %s (%s): %w", id, r.m.State, ErrNotFinal)
	}
	now := m.now()
	r.m.State, r.m.NextAttempt, r.m.Reason, r.m.Evidence = Queued, now, "", nil
	r.m.Created = now // the give-up age starts again
	r.m.unlease()
	r.m.Updated = now
	return nil
}

// Purge deletes up to limit final messages last updated before before,
// oldest first.
func (m *Memory) Purge(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("outbound: purge: %w", err)
	}
	if limit <= 0 {
		return 0, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var old []*memoryRow
	for _, r := range m.rows {
		if r.m.State.Final() && r.m.Updated.Before(before) {
			old = append(old, r)
		}
	}
	sort.Slice(old, func(i, j int) bool { return old[i].m.Updated.Before(old[j].m.Updated) })
	if len(old) > limit {
		old = old[:limit]
	}
	for _, r := range old {
		delete(m.rows, r.m.ID)
		if k := (partnerKey{r.m.Partner, r.m.MessageID}); m.byMessageID[k] == r.m.ID {
			delete(m.byMessageID, k)
		}
		if r.m.IdempotencyKey != "" {
			if k := (partnerKey{r.m.Partner, r.m.IdempotencyKey}); m.byKey[k] == r.m.ID {
				delete(m.byKey, k)
			}
		}
	}
	return len(old), nil
}

// cloneMessage returns msg sharing no memory with it.
func cloneMessage(msg Message) Message {
	msg.Sent = slices.Clone(msg.Sent)
	msg.Properties = slices.Clone(msg.Properties)
	msg.Evidence = cloneEvidence(msg.Evidence)
	return msg
}

func cloneEvidence(ev *Evidence) *Evidence {
	if ev == nil {
		return nil
	}
	c := *ev
	c.Body = bytes.Clone(ev.Body)
	return &c
}

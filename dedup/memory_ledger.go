package dedup

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"
)

// DefaultFindLimit bounds FindInterchanges when InterchangeQuery.Limit is
// zero or negative; ExpiredInterchanges uses it too for a non-positive limit.
const DefaultFindLimit = 1000

// ledgerRow is one interchange of the memory ledger.
type ledgerRow struct {
	claimRow
	ic         Interchange
	lastSeen   time.Time
	retries    int
	messageIDs []string
	window     time.Duration
}

func (r *ledgerRow) record() InterchangeRecord {
	return InterchangeRecord{
		Interchange:   r.ic,
		State:         r.state.String(),
		PayloadSHA256: r.payload,
		FirstSeen:     r.firstSeen,
		LastSeen:      r.lastSeen,
		Retries:       r.retries,
		MessageIDs:    slices.Clone(r.messageIDs),
		Window:        r.window,
	}
}

func (s rowState) String() string {
	switch s {
	case stateClaimed:
		return "claimed"
	case stateAccepted:
		return "accepted"
	case stateAbandoned:
		return "abandoned"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// FirstMessageIDs returns the transport ids a new ledger row starts with:
// none for an empty id, else the id alone.
func FirstMessageIDs(messageID string) []string {
	if messageID == "" {
		return []string{}
	}
	return []string{messageID}
}

// AppendMessageID returns ids with messageID appended, unless it is empty,
// already present, or ids already holds MaxLedgerMessageIDs (the oldest are
// kept). Every ledger records transport ids this way.
func AppendMessageID(ids []string, messageID string) []string {
	if messageID == "" || len(ids) >= MaxLedgerMessageIDs || slices.Contains(ids, messageID) {
		return ids
	}
	return append(ids, messageID)
}

// ClaimInterchange implements Ledger. It follows Claim's rules on the
// ledger's own rows; a Duplicate answer records the delivery (LastSeen, one
// more retry, the message id) under the same lock that decided it.
func (s *MemoryStore) ClaimInterchange(ctx context.Context, c InterchangeClaim) (Decision, error) {
	token, err := s.lockForClaim(ctx, "claim interchange")
	if err != nil {
		return Decision{}, err
	}
	defer s.mu.Unlock()
	now := s.now()
	var held *claimRow
	r, ok := s.ledger[c.Key]
	if ok {
		held = &r.claimRow
	}
	window := c.Window
	if ok {
		window = LongerWindow(r.window, c.Window)
	}
	var (
		d    Decision
		next claimRow
	)
	if ok && c.Supersede && r.state == stateAccepted {
		d = Decision{Outcome: Claimed, Token: token, Reused: true, FirstSeen: now}
		next = claimRow{state: stateClaimed, token: token, payload: c.PayloadSHA256, firstSeen: now, leaseUntil: now.Add(s.lease)}
	} else {
		d, next = decideClaim(held, now, window, s.lease, token, c.PayloadSHA256)
	}
	switch d.Outcome {
	case Duplicate:
		r.window = window // the longest that applies: purged only after it
		r.lastSeen = now
		r.retries++
		r.messageIDs = AppendMessageID(r.messageIDs, c.MessageID)
		d.Retries = r.retries
	case Claimed:
		if ok && r.state == stateAccepted {
			old := r.record()
			old.Replaced = now
			s.replaced = append(s.replaced, old)
		}
		s.ledger[c.Key] = &ledgerRow{
			claimRow:   next,
			ic:         c.Interchange,
			lastSeen:   now,
			messageIDs: FirstMessageIDs(c.MessageID),
			window:     max(c.Window, 0),
		}
	}
	return d, nil
}

// AcceptInterchange implements Ledger.
func (s *MemoryStore) AcceptInterchange(ctx context.Context, key Key, token Token) error {
	return s.ledgerTransition("accept interchange", key, token, stateAccepted)
}

// AbandonInterchange implements Ledger.
func (s *MemoryStore) AbandonInterchange(ctx context.Context, key Key, token Token) error {
	return s.ledgerTransition("abandon interchange", key, token, stateAbandoned)
}

func (s *MemoryStore) ledgerTransition(op string, key Key, token Token, to rowState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	r, ok := s.ledger[key]
	if !ok || !r.heldBy(token) {
		return fmt.Errorf("dedup: %s: %w", op, ErrStaleClaim)
	}
	r.state = to
	return nil
}

// Interchange implements Ledger.
func (s *MemoryStore) Interchange(ctx context.Context, key Key) (InterchangeRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return InterchangeRecord{}, errClosed
	}
	r, ok := s.ledger[key]
	if !ok {
		return InterchangeRecord{}, fmt.Errorf("dedup: interchange %.16s…: %w", key, ErrNotFound)
	}
	return r.record(), nil
}

// FindInterchanges implements Ledger. From is inclusive and To exclusive;
// rows come ordered by FirstSeen (then key), at most q.Limit of them
// (DefaultFindLimit when zero).
func (s *MemoryStore) FindInterchanges(ctx context.Context, q InterchangeQuery) ([]InterchangeRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	var out []InterchangeRecord
	for _, r := range s.ledger {
		if q.Partner != "" && r.ic.Partner != q.Partner ||
			q.Reference != "" && r.ic.Reference != q.Reference ||
			q.MessageID != "" && !slices.Contains(r.messageIDs, q.MessageID) ||
			!q.From.IsZero() && r.lastSeen.Before(q.From) ||
			!q.To.IsZero() && !r.lastSeen.Before(q.To) {
			continue
		}
		out = append(out, r.record())
	}
	sortByFirstSeen(out)
	return truncate(out, q.Limit), nil
}

// ExpiredInterchanges implements Ledger: accepted and abandoned rows with a
// positive window that passed, last seen before before, oldest last-seen
// first, at most limit (DefaultFindLimit when zero or negative).
func (s *MemoryStore) ExpiredInterchanges(ctx context.Context, before time.Time, limit int) ([]InterchangeRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	now := s.now()
	var out []InterchangeRecord
	for _, r := range s.ledger {
		if r.state != stateClaimed && r.window > 0 && r.firstSeen.Add(r.window).Before(now) && r.lastSeen.Before(before) {
			out = append(out, r.record())
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].LastSeen.Equal(out[j].LastSeen) {
			return out[i].LastSeen.Before(out[j].LastSeen)
		}
		return out[i].Key < out[j].Key
	})
	return truncate(out, limit), nil
}

// DeleteInterchanges implements Ledger: each row goes only if it is not a
// claim in progress and its FirstSeen still equals the record's.
func (s *MemoryStore) DeleteInterchanges(ctx context.Context, recs []InterchangeRecord) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, errClosed
	}
	var n int64
	for _, rec := range recs {
		r, ok := s.ledger[rec.Key]
		if ok && r.state != stateClaimed && r.firstSeen.Equal(rec.FirstSeen) {
			delete(s.ledger, rec.Key)
			n++
		}
	}
	return n, nil
}

// ReplacedInterchanges implements Ledger.
func (s *MemoryStore) ReplacedInterchanges(ctx context.Context, q InterchangeQuery) ([]InterchangeRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	var out []InterchangeRecord
	for _, r := range s.replaced {
		if q.Partner != "" && r.Partner != q.Partner ||
			q.Reference != "" && r.Reference != q.Reference ||
			q.MessageID != "" && !slices.Contains(r.MessageIDs, q.MessageID) ||
			!q.From.IsZero() && r.LastSeen.Before(q.From) ||
			!q.To.IsZero() && !r.LastSeen.Before(q.To) {
			continue
		}
		r.MessageIDs = slices.Clone(r.MessageIDs)
		out = append(out, r)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].Replaced.Equal(out[j].Replaced) {
			return out[i].Replaced.Before(out[j].Replaced)
		}
		return out[i].Key < out[j].Key
	})
	return truncate(out, q.Limit), nil
}

// DeleteReplaced implements Ledger.
func (s *MemoryStore) DeleteReplaced(ctx context.Context, recs []InterchangeRecord) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, errClosed
	}
	var n int64
	for _, rec := range recs {
		i := slices.IndexFunc(s.replaced, func(r InterchangeRecord) bool {
			return r.Key == rec.Key && r.FirstSeen.Equal(rec.FirstSeen) && r.Replaced.Equal(rec.Replaced)
		})
		if i >= 0 {
			s.replaced = slices.Delete(s.replaced, i, i+1)
			n++
		}
	}
	return n, nil
}

// LedgerLen returns the number of ledger rows held, in any state.
func (s *MemoryStore) LedgerLen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ledger)
}

func sortByFirstSeen(recs []InterchangeRecord) {
	sort.Slice(recs, func(i, j int) bool {
		if !recs[i].FirstSeen.Equal(recs[j].FirstSeen) {
			return recs[i].FirstSeen.Before(recs[j].FirstSeen)
		}
		return recs[i].Key < recs[j].Key
	})
}

func truncate(recs []InterchangeRecord, limit int) []InterchangeRecord {
	if limit <= 0 {
		limit = DefaultFindLimit
	}
	if len(recs) > limit {
		recs = recs[:limit]
	}
	return recs
}

var _ Ledger = (*MemoryStore)(nil)

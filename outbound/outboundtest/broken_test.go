package outboundtest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/outbound/outboundtest"
)

// brokenCases are stores that each break one rule of the contract (most
// wrap Memory and change one method), with the checks that must catch them.
func brokenCases() []brokenCase {
	w := func(name string, f func(s outbound.Store) outbound.Store, want ...string) brokenCase {
		return brokenCase{name, func() outbound.Store { return f(mem()) }, want}
	}
	return []brokenCase{
		w("drops-subject", func(s outbound.Store) outbound.Store { return dropsSubject{s} }, "submit/round-trip"),
		w("drops-properties", func(s outbound.Store) outbound.Store { return dropsProperties{s} }, "submit/properties"),
		w("truncates-payload", func(s outbound.Store) outbound.Store { return truncatesPayload{s} }, "submit/large-payload"),
		w("no-empty-payload", func(s outbound.Store) outbound.Store { return noEmptyPayload{s} }, "submit/empty-payload"),
		w("defaults-protocol", func(s outbound.Store) outbound.Store { return defaultsProtocol{s} }, "submit/invalid"),
		w("renames-transport-id", func(s outbound.Store) outbound.Store { return renamesTransportID{s} }, "submit/duplicate"),
		w("reads-known-payload", func(s outbound.Store) outbound.Store { return readsKnownPayload{s} }, "submit/idempotent"),
		w("ignores-key", func(s outbound.Store) outbound.Store { return ignoresKey{s} },
			"submit/idempotent", "submit/idempotent-concurrent"),
		{"racy-key", func() outbound.Store { return &racyKey{Store: mem(), keys: map[string]outbound.Message{}} },
			[]string{"submit/idempotent-concurrent"}},
		w("keeps-partial-payload", func(s outbound.Store) outbound.Store { return keepsPartial{s} }, "submit/failed-payload"),
		w("newest-due-first", func(s outbound.Store) outbound.Store { return newestDueFirst{s} }, "lease/due-order"),
		w("lease-ignores-duration", func(s outbound.Store) outbound.Store { return leaseIgnoresDuration{s} },
			"lease/concurrent", "lease/due-order", "lease/expiry"),
		w("retry-ignores-next", func(s outbound.Store) outbound.Store { return retryIgnoresNext{s} },
			"lease/not-due", "retry/schedules"),
		w("accepts-empty-token", func(s outbound.Store) outbound.Store { return acceptsEmptyToken{s} }, "lease/tokens"),
		w("unfenced", func(s outbound.Store) outbound.Store { return unfenced{s} },
			"lease/expiry", "lease/tokens", "cancel/leased"),
		w("awaiting-never-due", func(s outbound.Store) outbound.Store { return awaitingNeverDue{s} }, "lease/awaiting-due"),
		w("renew-noop", func(s outbound.Store) outbound.Store { return renewNoop{s} },
			"renew/keeps", "renew/expired-not-taken"),
		w("renew-refuses-expired", func(s outbound.Store) outbound.Store { return renewRefusesExpired{s} },
			"renew/expired-not-taken"),
		w("release-noop", func(s outbound.Store) outbound.Store { return releaseNoop{s} }, "release/due-now"),
		w("posting-counts-digests", func(s outbound.Store) outbound.Store { return postingCountsDigests{s} },
			"posting/counts", "lease/awaiting-due"),
		w("awaiting-as-retry", func(s outbound.Store) outbound.Store { return awaitingAsRetry{s} }, "awaiting/waits"),
		w("delivered-drops-evidence", func(s outbound.Store) outbound.Store { return deliveredDropsEvidence{s} },
			"final/delivered"),
		w("failed-drops-reason", func(s outbound.Store) outbound.Store { return failedDropsReason{s} }, "final/failed"),
		w("settle-always-delivers", func(s outbound.Store) outbound.Store { return settleAlwaysDelivers{s} },
			"settle/awaiting"),
		w("settle-skips-leased", func(s outbound.Store) outbound.Store { return settleSkipsLeased{s} }, "settle/leased"),
		w("settle-always-changed", func(s outbound.Store) outbound.Store { return settleAlwaysChanged{s} }, "settle/final"),
		w("settle-any-partner", func(s outbound.Store) outbound.Store { return settleAnyPartner{s} }, "settle/not-found"),
		w("find-any-partner", func(s outbound.Store) outbound.Store { return findAnyPartner{s} }, "find/by-message-id"),
		w("list-oldest-first", func(s outbound.Store) outbound.Store { return listOldestFirst{s} }, "list/filters"),
		w("list-ignores-before", func(s outbound.Store) outbound.Store { return listIgnoresBefore{s} }, "list/filters"),
		{"list-ignores-before-id", func() outbound.Store { return listIgnoresBeforeID{outboundtest.NewMemory()} },
			[]string{"list/same-created"}},
		w("list-unlimited", func(s outbound.Store) outbound.Store { return listUnlimited{s} }, "list/default-limit"),
		w("stats-no-oldest", func(s outbound.Store) outbound.Store { return statsNoOldest{s} }, "stats/per-partner"),
		w("stats-leased-not-queued", func(s outbound.Store) outbound.Store { return statsLeasedNotQueued{s} },
			"stats/per-partner"),
		w("cancel-refuses-awaiting", func(s outbound.Store) outbound.Store { return cancelRefusesAwaiting{s} },
			"cancel/not-final"),
		w("cancel-refuses-leased", func(s outbound.Store) outbound.Store { return cancelRefusesLeased{s} },
			"cancel/leased"),
		w("cancel-final-noop", func(s outbound.Store) outbound.Store { return cancelFinalNoop{s} }, "cancel/final"),
		w("resend-refuses-cancelled", func(s outbound.Store) outbound.Store { return resendRefusesCancelled{s} },
			"resend/failed-cancelled"),
		w("resend-delivered-not-final", func(s outbound.Store) outbound.Store { return resendDeliveredNotFinal{s} },
			"resend/refused"),
		w("purge-any-state", func(s outbound.Store) outbound.Store { return purgeAnyState{s} }, "purge/final-only"),
		w("purge-ignores-limit", func(s outbound.Store) outbound.Store { return purgeIgnoresLimit{s} }, "purge/final-only"),
		w("purge-ignores-bound", func(s outbound.Store) outbound.Store { return purgeIgnoresBound{s} }, "purge/final-only"),
		w("unknown-as-lease-lost", func(s outbound.Store) outbound.Store { return unknownAsLeaseLost{s} },
			"unknown/not-found"),
		{"aliased-evidence", func() outbound.Store {
			return &aliasedEvidence{Store: mem(), ev: map[string]*outbound.Evidence{}}
		}, []string{"copies/no-aliasing"}},
	}
}

type dropsSubject struct{ outbound.Store }

func (s dropsSubject) Submit(ctx context.Context, m outbound.Message, r io.Reader) (outbound.Message, bool, error) {
	m.Subject = ""
	return s.Store.Submit(ctx, m, r)
}

// dropsProperties loses a message's properties once it is final (a Resend
// or a final-state update that rewrites the row without them).
type dropsProperties struct{ outbound.Store }

func (s dropsProperties) Get(ctx context.Context, id string) (outbound.Message, error) {
	m, err := s.Store.Get(ctx, id)
	if m.State.Final() || m.Attempts > 0 || !m.Created.Equal(m.Updated) {
		m.Properties = nil
	}
	return m, err
}

type truncatesPayload struct{ outbound.Store }

func (s truncatesPayload) Submit(ctx context.Context, m outbound.Message, r io.Reader) (outbound.Message, bool, error) {
	return s.Store.Submit(ctx, m, io.LimitReader(r, 4<<20))
}

// noEmptyPayload keeps no payload for 0 bytes (as a store keeping payloads
// in files might) and cannot open it.
type noEmptyPayload struct{ outbound.Store }

func (s noEmptyPayload) OpenPayload(ctx context.Context, id string) (io.ReadCloser, error) {
	if m, err := s.Get(ctx, id); err == nil && m.Size == 0 {
		return nil, fmt.Errorf("no payload file for %s", id)
	}
	return s.Store.OpenPayload(ctx, id)
}

type defaultsProtocol struct{ outbound.Store }

func (s defaultsProtocol) Submit(ctx context.Context, m outbound.Message, r io.Reader) (outbound.Message, bool, error) {
	if m.Protocol == "" {
		m.Protocol = outbound.AS2
	}
	return s.Store.Submit(ctx, m, r)
}

// renamesTransportID queues a message whose transport id is taken under
// another one instead of refusing it.
type renamesTransportID struct{ outbound.Store }

func (s renamesTransportID) Submit(ctx context.Context, m outbound.Message, r io.Reader) (outbound.Message, bool, error) {
	if _, err := s.FindByMessageID(ctx, m.Partner, m.MessageID); err == nil {
		m.MessageID += "-2"
	}
	return s.Store.Submit(ctx, m, r)
}

type readsKnownPayload struct{ outbound.Store }

func (s readsKnownPayload) Submit(ctx context.Context, m outbound.Message, r io.Reader) (outbound.Message, bool, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return outbound.Message{}, false, err
	}
	return s.Store.Submit(ctx, m, bytes.NewReader(b))
}

type ignoresKey struct{ outbound.Store }

func (s ignoresKey) Submit(ctx context.Context, m outbound.Message, r io.Reader) (outbound.Message, bool, error) {
	m.IdempotencyKey = ""
	return s.Store.Submit(ctx, m, r)
}

// racyKey looks the key up, then queues (as a SELECT followed by an INSERT
// without a unique index would): concurrent submissions with one key all
// create a message.
type racyKey struct {
	outbound.Store
	mu   sync.Mutex
	keys map[string]outbound.Message
}

func (s *racyKey) Submit(ctx context.Context, m outbound.Message, r io.Reader) (outbound.Message, bool, error) {
	k := m.Partner + "\x00" + m.IdempotencyKey
	s.mu.Lock()
	old, ok := s.keys[k] // check …
	s.mu.Unlock()
	if ok && m.IdempotencyKey != "" {
		return old, false, nil
	}
	time.Sleep(5 * time.Millisecond)
	key := m.IdempotencyKey
	m.IdempotencyKey = ""
	got, created, err := s.Store.Submit(ctx, m, r) // … then act
	if err == nil && key != "" {
		got.IdempotencyKey = key
		s.mu.Lock()
		s.keys[k] = got
		s.mu.Unlock()
	}
	return got, created, err
}

// keepsPartial stores what it read of a payload that failed midway.
type keepsPartial struct{ outbound.Store }

func (s keepsPartial) Submit(ctx context.Context, m outbound.Message, r io.Reader) (outbound.Message, bool, error) {
	b, rerr := io.ReadAll(r)
	got, created, err := s.Store.Submit(ctx, m, bytes.NewReader(b))
	if rerr != nil {
		return got, created, rerr
	}
	return got, created, err
}

// newestDueFirst hands out the latest due messages first.
type newestDueFirst struct{ outbound.Store }

func (s newestDueFirst) Lease(ctx context.Context, limit int, lease time.Duration) ([]outbound.Message, error) {
	if limit <= 0 {
		return nil, nil
	}
	got, err := s.Store.Lease(ctx, 1000, lease)
	if err != nil {
		return nil, err
	}
	sort.SliceStable(got, func(i, j int) bool { return got[i].NextAttempt.After(got[j].NextAttempt) })
	for _, m := range got[min(limit, len(got)):] {
		if err := s.Release(ctx, m.ID, m.LeaseToken); err != nil {
			return nil, err
		}
	}
	return got[:min(limit, len(got))], nil
}

// leaseIgnoresDuration holds nothing: a leased message is due again at once.
type leaseIgnoresDuration struct{ outbound.Store }

func (s leaseIgnoresDuration) Lease(ctx context.Context, limit int, _ time.Duration) ([]outbound.Message, error) {
	return s.Store.Lease(ctx, limit, 0)
}

type retryIgnoresNext struct{ outbound.Store }

func (s retryIgnoresNext) Retry(ctx context.Context, id, token string, _ time.Time, lastErr string) error {
	return s.Store.Retry(ctx, id, token, time.Now(), lastErr)
}

// acceptsEmptyToken takes an empty token as the operator's "any".
type acceptsEmptyToken struct{ outbound.Store }

func (s acceptsEmptyToken) Renew(ctx context.Context, id, token string, lease time.Duration) error {
	if token == "" {
		if _, err := s.Get(ctx, id); err != nil {
			return err
		}
		return nil
	}
	return s.Store.Renew(ctx, id, token, lease)
}

// unfenced uses the message's current lease whatever token it is given.
type unfenced struct{ outbound.Store }

func (s unfenced) current(ctx context.Context, id, token string) string {
	if m, err := s.Get(ctx, id); err == nil && m.LeaseToken != "" {
		return m.LeaseToken
	}
	return token
}

func (s unfenced) Renew(ctx context.Context, id, token string, lease time.Duration) error {
	return s.Store.Renew(ctx, id, s.current(ctx, id, token), lease)
}

func (s unfenced) Release(ctx context.Context, id, token string) error {
	return s.Store.Release(ctx, id, s.current(ctx, id, token))
}

func (s unfenced) Posting(ctx context.Context, id, token, digest string) error {
	return s.Store.Posting(ctx, id, s.current(ctx, id, token), digest)
}

func (s unfenced) Retry(ctx context.Context, id, token string, next time.Time, lastErr string) error {
	return s.Store.Retry(ctx, id, s.current(ctx, id, token), next, lastErr)
}

func (s unfenced) Delivered(ctx context.Context, id, token string, ev *outbound.Evidence) error {
	return s.Store.Delivered(ctx, id, s.current(ctx, id, token), ev)
}

// Cancel and Settle leave the lease in place, so that the worker's outcome
// lands after them.
func (s unfenced) Cancel(ctx context.Context, id, reason string) error {
	if m, err := s.Get(ctx, id); err == nil && m.Sending(time.Now()) {
		return s.Store.Failed(ctx, id, m.LeaseToken, reason, nil)
	}
	return s.Store.Cancel(ctx, id, reason)
}

// awaitingNeverDue never hands out a message awaiting its MDN.
type awaitingNeverDue struct{ outbound.Store }

func (s awaitingNeverDue) Lease(ctx context.Context, limit int, lease time.Duration) ([]outbound.Message, error) {
	got, err := s.Store.Lease(ctx, limit, lease)
	if err != nil {
		return nil, err
	}
	out := got[:0]
	for _, m := range got {
		if m.State == outbound.AwaitingMDN {
			if err := s.Release(ctx, m.ID, m.LeaseToken); err != nil {
				return nil, err
			}
			continue
		}
		out = append(out, m)
	}
	return out, nil
}

type renewNoop struct{ outbound.Store }

func (renewNoop) Renew(context.Context, string, string, time.Duration) error { return nil }

// renewRefusesExpired refuses to renew a lease that ran out, even when
// nobody took the message over.
type renewRefusesExpired struct{ outbound.Store }

func (s renewRefusesExpired) Renew(ctx context.Context, id, token string, lease time.Duration) error {
	if m, err := s.Get(ctx, id); err == nil && m.LeaseToken == token && !m.Sending(time.Now()) {
		return fmt.Errorf("lease ran out: %w", outbound.ErrLeaseLost)
	}
	return s.Store.Renew(ctx, id, token, lease)
}

type releaseNoop struct{ outbound.Store }

func (s releaseNoop) Release(ctx context.Context, id, token string) error {
	return s.Renew(ctx, id, token, time.Hour)
}

// postingCountsDigests counts a transmission only when its digest is new.
type postingCountsDigests struct{ outbound.Store }

func (s postingCountsDigests) Posting(ctx context.Context, id, token, digest string) error {
	if m, err := s.Get(ctx, id); err == nil && m.LeaseToken == token && slices.Contains(m.Sent, digest) {
		return nil
	}
	return s.Store.Posting(ctx, id, token, digest)
}

type awaitingAsRetry struct{ outbound.Store }

func (s awaitingAsRetry) Awaiting(ctx context.Context, id, token string, deadline time.Time) error {
	return s.Retry(ctx, id, token, deadline, "")
}

type deliveredDropsEvidence struct{ outbound.Store }

func (s deliveredDropsEvidence) Delivered(ctx context.Context, id, token string, _ *outbound.Evidence) error {
	return s.Store.Delivered(ctx, id, token, nil)
}

type failedDropsReason struct{ outbound.Store }

func (s failedDropsReason) Failed(ctx context.Context, id, token, _ string, ev *outbound.Evidence) error {
	return s.Store.Failed(ctx, id, token, "failed", ev)
}

type settleAlwaysDelivers struct{ outbound.Store }

func (s settleAlwaysDelivers) Settle(ctx context.Context, partner, messageID string, _ bool, reason string, ev *outbound.Evidence) (outbound.Message, bool, error) {
	return s.Store.Settle(ctx, partner, messageID, true, reason, ev)
}

// settleSkipsLeased leaves a message being sent to its worker.
type settleSkipsLeased struct{ outbound.Store }

func (s settleSkipsLeased) Settle(ctx context.Context, partner, messageID string, delivered bool, reason string, ev *outbound.Evidence) (outbound.Message, bool, error) {
	if m, err := s.FindByMessageID(ctx, partner, messageID); err == nil && m.Sending(time.Now()) {
		return m, false, nil
	}
	return s.Store.Settle(ctx, partner, messageID, delivered, reason, ev)
}

type settleAlwaysChanged struct{ outbound.Store }

func (s settleAlwaysChanged) Settle(ctx context.Context, partner, messageID string, delivered bool, reason string, ev *outbound.Evidence) (outbound.Message, bool, error) {
	m, _, err := s.Store.Settle(ctx, partner, messageID, delivered, reason, ev)
	return m, err == nil, err
}

// byTransportID finds a message by its transport id whatever its partner.
func byTransportID(ctx context.Context, s outbound.Store, messageID string) (outbound.Message, bool) {
	all, err := s.List(ctx, outbound.Filter{Limit: 1000})
	if err != nil {
		return outbound.Message{}, false
	}
	for _, m := range all {
		if m.MessageID == messageID {
			return m, true
		}
	}
	return outbound.Message{}, false
}

type settleAnyPartner struct{ outbound.Store }

func (s settleAnyPartner) Settle(ctx context.Context, partner, messageID string, delivered bool, reason string, ev *outbound.Evidence) (outbound.Message, bool, error) {
	if m, ok := byTransportID(ctx, s.Store, messageID); ok {
		partner = m.Partner
	}
	return s.Store.Settle(ctx, partner, messageID, delivered, reason, ev)
}

type findAnyPartner struct{ outbound.Store }

func (s findAnyPartner) FindByMessageID(ctx context.Context, partner, messageID string) (outbound.Message, error) {
	m, err := s.Store.FindByMessageID(ctx, partner, messageID)
	if errors.Is(err, outbound.ErrNotFound) {
		if m, ok := byTransportID(ctx, s.Store, messageID); ok {
			return m, nil
		}
	}
	return m, err
}

type listOldestFirst struct{ outbound.Store }

func (s listOldestFirst) List(ctx context.Context, f outbound.Filter) ([]outbound.Message, error) {
	limit := f.Limit
	f.Limit = 1000
	got, err := s.Store.List(ctx, f)
	slices.Reverse(got)
	if limit <= 0 {
		limit = 100
	}
	return got[:min(limit, len(got))], err
}

type listIgnoresBefore struct{ outbound.Store }

func (s listIgnoresBefore) List(ctx context.Context, f outbound.Filter) ([]outbound.Message, error) {
	f.Before = time.Time{}
	return s.Store.List(ctx, f)
}

// listIgnoresBeforeID pages by Created alone: it skips the messages that
// share the Created of a page's last message.
type listIgnoresBeforeID struct{ *outboundtest.ClockedMemory }

func (s listIgnoresBeforeID) List(ctx context.Context, f outbound.Filter) ([]outbound.Message, error) {
	f.BeforeID = ""
	return s.ClockedMemory.List(ctx, f)
}

type listUnlimited struct{ outbound.Store }

func (s listUnlimited) List(ctx context.Context, f outbound.Filter) ([]outbound.Message, error) {
	if f.Limit == 0 {
		f.Limit = 1 << 20
	}
	return s.Store.List(ctx, f)
}

type statsNoOldest struct{ outbound.Store }

func (s statsNoOldest) Stats(ctx context.Context) ([]outbound.Stats, error) {
	st, err := s.Store.Stats(ctx)
	for i := range st {
		st[i].OldestQueued = time.Time{}
	}
	return st, err
}

// statsLeasedNotQueued does not count the messages being sent as queued.
type statsLeasedNotQueued struct{ outbound.Store }

func (s statsLeasedNotQueued) Stats(ctx context.Context) ([]outbound.Stats, error) {
	st, err := s.Store.Stats(ctx)
	if err != nil {
		return nil, err
	}
	all, err := s.List(ctx, outbound.Filter{Limit: 1000})
	for _, m := range all {
		for i := range st {
			if st[i].Partner == m.Partner && m.Sending(time.Now()) {
				st[i].Queued--
			}
		}
	}
	return st, err
}

type cancelRefusesAwaiting struct{ outbound.Store }

func (s cancelRefusesAwaiting) Cancel(ctx context.Context, id, reason string) error {
	if m, err := s.Get(ctx, id); err == nil && m.State == outbound.AwaitingMDN {
		return fmt.Errorf("sent already: %w", outbound.ErrFinal)
	}
	return s.Store.Cancel(ctx, id, reason)
}

type cancelRefusesLeased struct{ outbound.Store }

func (s cancelRefusesLeased) Cancel(ctx context.Context, id, reason string) error {
	if m, err := s.Get(ctx, id); err == nil && m.Sending(time.Now()) {
		return errors.New("being sent")
	}
	return s.Store.Cancel(ctx, id, reason)
}

type cancelFinalNoop struct{ outbound.Store }

func (s cancelFinalNoop) Cancel(ctx context.Context, id, reason string) error {
	if err := s.Store.Cancel(ctx, id, reason); err != nil && !errors.Is(err, outbound.ErrFinal) {
		return err
	}
	return nil
}

type resendRefusesCancelled struct{ outbound.Store }

func (s resendRefusesCancelled) Resend(ctx context.Context, id string) error {
	if m, err := s.Get(ctx, id); err == nil && m.State == outbound.Cancelled {
		return fmt.Errorf("cancelled by an operator: %w", outbound.ErrFinal)
	}
	return s.Store.Resend(ctx, id)
}

type resendDeliveredNotFinal struct{ outbound.Store }

func (s resendDeliveredNotFinal) Resend(ctx context.Context, id string) error {
	if m, err := s.Get(ctx, id); err == nil && m.State == outbound.Delivered {
		return fmt.Errorf("delivered: %w", outbound.ErrNotFinal)
	}
	return s.Store.Resend(ctx, id)
}

// unknownAsLeaseLost answers a worker's call on an unknown id as on a lost
// lease.
type unknownAsLeaseLost struct{ outbound.Store }

func (s unknownAsLeaseLost) Posting(ctx context.Context, id, token, digest string) error {
	err := s.Store.Posting(ctx, id, token, digest)
	if errors.Is(err, outbound.ErrNotFound) {
		return fmt.Errorf("%s: %w", id, outbound.ErrLeaseLost)
	}
	return err
}

// aliasedEvidence keeps the caller's evidence and hands it out.
type aliasedEvidence struct {
	outbound.Store
	mu sync.Mutex
	ev map[string]*outbound.Evidence
}

func (s *aliasedEvidence) Delivered(ctx context.Context, id, token string, ev *outbound.Evidence) error {
	err := s.Store.Delivered(ctx, id, token, ev)
	if err == nil {
		s.mu.Lock()
		s.ev[id] = ev
		s.mu.Unlock()
	}
	return err
}

func (s *aliasedEvidence) Get(ctx context.Context, id string) (outbound.Message, error) {
	m, err := s.Store.Get(ctx, id)
	s.mu.Lock()
	if ev, ok := s.ev[id]; ok && err == nil {
		m.Evidence = ev
	}
	s.mu.Unlock()
	return m, err
}

// purgeAnyState purges queued and awaiting messages too: it cancels every
// old one that is not final first.
type purgeAnyState struct{ outbound.Store }

func (s purgeAnyState) Purge(ctx context.Context, before time.Time, limit int) (int, error) {
	ms, err := s.List(ctx, outbound.Filter{States: []outbound.State{outbound.Queued, outbound.AwaitingMDN}, Limit: 1000})
	if err != nil {
		return 0, err
	}
	for _, m := range ms {
		if m.Updated.Before(before) {
			if err := s.Cancel(ctx, m.ID, "purged"); err != nil {
				return 0, err
			}
		}
	}
	return s.Store.Purge(ctx, time.Now().Add(time.Hour), limit)
}

// purgeIgnoresLimit purges every old final message at once.
type purgeIgnoresLimit struct{ outbound.Store }

func (s purgeIgnoresLimit) Purge(ctx context.Context, before time.Time, limit int) (int, error) {
	return s.Store.Purge(ctx, before, 1<<20)
}

// purgeIgnoresBound purges final messages whatever their age.
type purgeIgnoresBound struct{ outbound.Store }

func (s purgeIgnoresBound) Purge(ctx context.Context, _ time.Time, limit int) (int, error) {
	return s.Store.Purge(ctx, time.Now().Add(time.Hour), limit)
}

// Package outboundtest is the conformance kit of outbound.Store, the
// durable queue of messages to send: one call runs every rule of the
// contract against a store implementation.
//
// Use it from a store package's tests:
//
//	func TestOutboundContract(t *testing.T) {
//		outboundtest.Exercise(t, func(t *testing.T) outbound.Store {
//			return mystore.Open(t) // an empty queue; close it with t.Cleanup
//		})
//	}
//
// Every subtest opens its own store (Lease hands out any due message, so
// stores must not be shared between subtests). The kit cannot set a store's
// clock: the checks that wait for a lease or a deadline to run out use
// ShortLease and sleep past it, in parallel, so the whole kit takes about a
// second plus the stores' own time. Stores are expected to read time from a
// clock close to the test process's own (the database server of SQL stores
// runs on the same host in tests).
package outboundtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/edigateway/gateway/outbound"
)

// T is the part of *testing.T the kit uses. Std adapts a *testing.T; tests of
// the kit itself pass a recorder to see which checks fail.
type T interface {
	testing.TB
	// Run runs f as a subtest named name, like (*testing.T).Run.
	Run(name string, f func(t T)) bool
	// Parallel signals that the subtest may run in parallel with its
	// siblings, like (*testing.T).Parallel.
	Parallel()
}

// Std adapts a *testing.T to T.
func Std(t *testing.T) T { return stdT{t} }

type stdT struct{ *testing.T }

func (s stdT) Run(name string, f func(t T)) bool {
	return s.T.Run(name, func(t *testing.T) { f(stdT{t}) })
}

// ShortLease is the lease (and the deadline) of the checks that wait for
// one to run out; they sleep ShortLease + leaseSlack.
const ShortLease = 300 * time.Millisecond

// leaseSlack is how long past ShortLease the timed checks sleep.
const leaseSlack = 150 * time.Millisecond

// ClockSkew is how far a time a store sets itself (Created, Updated, a due
// time of now, LeasedUntil) may be from the test's clock.
const ClockSkew = 5 * time.Second

// timeSlack is how far a stored time may be from the one given: SQL stores
// keep milliseconds (SQLite) or microseconds (PostgreSQL).
const timeSlack = 2 * time.Millisecond

// callTimeout bounds every store call of the kit so a hanging store fails
// instead of stalling the test binary.
const callTimeout = 30 * time.Second

// Exercise runs the whole contract against the stores open returns (one
// empty store per subtest), as subtests of t.
func Exercise(t *testing.T, open func(t *testing.T) outbound.Store) {
	t.Helper()
	ExerciseT(Std(t), func(t T) outbound.Store {
		st, ok := t.(stdT)
		if !ok {
			t.Fatalf("outboundtest: Exercise's subtests are %T, not *testing.T", t)
		}
		return open(st.T)
	})
}

// ExerciseT is Exercise for any T. The subtests, by name:
//
//	submit/round-trip          Submit and Get return every field given; Size, SHA256, Queued, 0 attempts,
//	                           due, created and updated now are the store's (forged state fields ignored)
//	submit/large-payload       a 5 MiB payload written and read back in small reads is byte-identical
//	submit/empty-payload       a 0-byte payload: size 0, the empty SHA-256, an empty reader
//	submit/invalid             an empty ID, MessageID, Partner or Protocol is refused, nothing stored
//	submit/duplicate           a taken ID, or a taken (Partner, MessageID), is refused and changes nothing;
//	                           the same MessageID for another partner is another message
//	submit/idempotent          a known (Partner, IdempotencyKey) returns the first message, created false,
//	                           without reading the payload; the key for another partner, or no key, is new
//	submit/idempotent-concurrent  20 concurrent Submits with one key (their payloads read at the same
//	                           time): one created, all return its ID
//	submit/failed-payload      a payload reader failing midway stores nothing and leaves the key free
//	submit/properties          Properties (AS4 part properties) come back whole and in order from Submit,
//	                           Get, FindByMessageID, List and Lease, and after Failed and Resend; none for
//	                           a message without; 32 properties of 1024-byte values fit
//	lease/due-order            Lease hands out due messages, oldest NextAttempt first, up to limit, each
//	                           with its own token and LeasedUntil; limit 0 hands out nothing
//	lease/not-due              a retry or an awaited MDN not due yet and final messages are not handed out
//	lease/concurrent           8 concurrent leasers of 30 messages: each handed out exactly once
//	lease/expiry               a lease that ran out is handed out again under a new token; the old token's
//	                           Renew, Release, Posting, Retry, Awaiting, Delivered, Failed: ErrLeaseLost
//	lease/awaiting-due         an AwaitingMDN message is handed out once its deadline passed, and then held
//	lease/tokens               a message not leased, or an empty or another message's token: ErrLeaseLost
//	renew/keeps                Renew holds the message past its first lease
//	renew/expired-not-taken    a lease that ran out but nobody took over may still be renewed and used
//	release/due-now            Release: handed out again at once, no attempt counted; a stale Release fails
//	posting/counts             Posting: Attempts+1 each time, each digest once in Sent, the lease kept
//	retry/schedules            Retry: Queued, NextAttempt, LastError, lease released; due at next
//	awaiting/waits             Awaiting: AwaitingMDN until the deadline, lease released
//	final/delivered            Delivered: final with the evidence byte for byte, never handed out again
//	final/failed               Failed: final with reason and evidence (or none)
//	settle/awaiting            Settle of an AwaitingMDN message: delivered (or failed) with the evidence
//	settle/leased              Settle of a leased Queued message: changed; the worker's outcome: ErrLeaseLost
//	settle/final               Settle of a delivered, failed or cancelled message: unchanged, changed false
//	                           (a duplicate or late MDN)
//	settle/not-found           Settle for another partner or an unknown transport id: ErrNotFound
//	find/by-message-id         FindByMessageID finds the partner's message only
//	list/filters               List: newest first, by Partner, States, Before, Limit; pages with Before
//	list/default-limit         List with Limit 0 returns 100 messages
//	list/same-created          paging by 4 with (Before, BeforeID) through 30 messages created at 3 instants
//	                           returns each once, newest first (Created, then ID), for every filter; Before
//	                           alone bounds by time (needs a Backdater: skipped for other stores)
//	stats/per-partner          Stats: counts by state per partner, OldestQueued the oldest queued's Created
//	cancel/not-final           Cancel of a Queued or AwaitingMDN message: Cancelled with reason, not leased
//	cancel/leased              Cancel of a leased message: the worker's outcome fails with ErrLeaseLost
//	cancel/final               Cancel of a final message: ErrFinal, unchanged
//	resend/failed-cancelled    Resend of a Failed or Cancelled message: Queued, due now, same MessageID
//	resend/refused             Resend of a Queued or AwaitingMDN message: ErrNotFinal; Delivered: ErrFinal
//	purge/final-only           Purge deletes final messages updated before the bound with their payloads,
//	                           at most limit per call; queued, awaiting, leased and recent ones stay; a
//	                           purged message's idempotency key is free again
//	unknown/not-found          every call on an unknown id: ErrNotFound
//	copies/no-aliasing         changing a returned message's Sent or Evidence, or the evidence given,
//	                           changes nothing stored
func ExerciseT(t T, open func(t T) outbound.Store) {
	t.Helper()
	k := kit{open: open}
	t.Run("submit", func(t T) {
		t.Run("round-trip", k.roundTrip)
		t.Run("large-payload", k.largePayload)
		t.Run("empty-payload", k.emptyPayload)
		t.Run("invalid", k.invalid)
		t.Run("duplicate", k.duplicate)
		t.Run("idempotent", k.idempotent)
		t.Run("idempotent-concurrent", k.idempotentConcurrent)
		t.Run("failed-payload", k.failedPayload)
		t.Run("properties", k.properties)
	})
	t.Run("lease", func(t T) {
		t.Run("due-order", k.dueOrder)
		t.Run("not-due", k.notDue)
		t.Run("concurrent", k.concurrentLease)
		t.Run("tokens", k.tokens)
		t.Run("expiry", k.expiry)
		t.Run("awaiting-due", k.awaitingDue)
	})
	t.Run("renew", func(t T) {
		t.Run("keeps", k.renewKeeps)
		t.Run("expired-not-taken", k.renewExpiredNotTaken)
	})
	t.Run("release", func(t T) { t.Run("due-now", k.releaseDueNow) })
	t.Run("posting", func(t T) { t.Run("counts", k.postingCounts) })
	t.Run("retry", func(t T) { t.Run("schedules", k.retrySchedules) })
	t.Run("awaiting", func(t T) { t.Run("waits", k.awaitingWaits) })
	t.Run("final", func(t T) {
		t.Run("delivered", k.delivered)
		t.Run("failed", k.failed)
	})
	t.Run("settle", func(t T) {
		t.Run("awaiting", k.settleAwaiting)
		t.Run("leased", k.settleLeased)
		t.Run("final", k.settleFinal)
		t.Run("not-found", k.settleNotFound)
	})
	t.Run("find", func(t T) { t.Run("by-message-id", k.findByMessageID) })
	t.Run("list", func(t T) {
		t.Run("filters", k.listFilters)
		t.Run("default-limit", k.listDefaultLimit)
		t.Run("same-created", k.listSameCreated)
	})
	t.Run("stats", func(t T) { t.Run("per-partner", k.stats) })
	t.Run("cancel", func(t T) {
		t.Run("not-final", k.cancelNotFinal)
		t.Run("leased", k.cancelLeased)
		t.Run("final", k.cancelFinal)
	})
	t.Run("resend", func(t T) {
		t.Run("failed-cancelled", k.resendFinal)
		t.Run("refused", k.resendRefused)
	})
	t.Run("purge", func(t T) { t.Run("final-only", k.purgeFinalOnly) })
	t.Run("unknown", func(t T) { t.Run("not-found", k.unknown) })
	t.Run("copies", func(t T) { t.Run("no-aliasing", k.copies) })
}

type kit struct{ open func(t T) outbound.Store }

// store opens an empty store for one subtest.
func (k kit) store(t T) outbound.Store {
	t.Helper()
	s := k.open(t)
	if s == nil {
		t.Fatalf("open returned nil")
	}
	return s
}

func ctx(t T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return c
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("random: %v", err)
	}
	return hex.EncodeToString(b)
}

// NewMessage returns a message to Submit to partner with a fresh ID and
// transport id and every field a caller sets filled, some with non-ASCII
// text.
func NewMessage(t testing.TB, partner string) outbound.Message {
	t.Helper()
	id := outbound.NewID(time.Now()) + randomHex(t, 2)
	return outbound.Message{
		ID:             id,
		Partner:        partner,
		Protocol:       outbound.AS2,
		MessageID:      "<" + id + "@gateway.example>",
		Source:         "api",
		ContentType:    "application/edi-x12; charset=utf-8",
		Filename:       "order-" + id[:6] + "-ü.edi",
		Subject:        "Purchase order №" + id[:4],
		Service:        "urn:example:services:orders",
		Action:         "Submit",
		ConversationID: "conv-" + id,
	}
}

// sha is the lowercase hex SHA-256 of b.
func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// testPayload is a payload with NUL bytes, invalid UTF-8 and CRLF.
var testPayload = []byte("ISA*00*          *00*\r\n\x00\x01\xff\xfe\xc3\x28 GS*PO~\r\n")

func submit(t T, c context.Context, s outbound.Store, m outbound.Message, payload []byte) outbound.Message {
	t.Helper()
	got, created, err := s.Submit(c, m, bytes.NewReader(payload))
	if err != nil {
		t.Fatalf("Submit(%s): %v", m.ID, err)
	}
	if !created {
		t.Fatalf("Submit(%s): created false for a new message", m.ID)
	}
	return got
}

// queue submits a fresh message for partner with testPayload.
func queue(t T, c context.Context, s outbound.Store, partner string) outbound.Message {
	t.Helper()
	return submit(t, c, s, NewMessage(t, partner), testPayload)
}

func get(t T, c context.Context, s outbound.Store, id string) outbound.Message {
	t.Helper()
	m, err := s.Get(c, id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return m
}

func lease(t T, c context.Context, s outbound.Store, limit int, d time.Duration) []outbound.Message {
	t.Helper()
	got, err := s.Lease(c, limit, d)
	if err != nil {
		t.Fatalf("Lease: %v", err)
	}
	return got
}

// leaseOnly leases and wants exactly the message id; it returns its token.
func leaseOnly(t T, c context.Context, s outbound.Store, id string, d time.Duration) string {
	t.Helper()
	got := lease(t, c, s, 10, d)
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("Lease returned %v, want [%s]", ids(got), id)
	}
	if got[0].LeaseToken == "" {
		t.Fatalf("leased message %s without a LeaseToken", id)
	}
	return got[0].LeaseToken
}

// leaseNone wants Lease to hand out nothing.
func leaseNone(t T, c context.Context, s outbound.Store, what string) {
	t.Helper()
	if got := lease(t, c, s, 10, time.Hour); len(got) != 0 {
		t.Errorf("%s: Lease returned %v, want nothing", what, ids(got))
	}
}

func ids(ms []outbound.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func near(a, b time.Time, slack time.Duration) bool {
	d := a.Sub(b)
	return d > -slack && d < slack
}

func mustOK(t T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// mustIs wants an error wrapping target.
func mustIs(t T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: %v, want %v", what, err, target)
	}
}

func mustLost(t T, err error, what string) {
	t.Helper()
	mustIs(t, err, outbound.ErrLeaseLost, what)
}

func mustNotFound(t T, err error, what string) {
	t.Helper()
	mustIs(t, err, outbound.ErrNotFound, what)
}

// sameSubmitted compares the fields the submitter sets.
func sameSubmitted(t T, got, want outbound.Message, what string) {
	t.Helper()
	type fields struct {
		ID, Partner, MessageID, IdempotencyKey, Source, ContentType, Filename, Subject string
		Service, Action, ConversationID                                                string
		Protocol                                                                       outbound.Protocol
	}
	f := func(m outbound.Message) fields {
		return fields{m.ID, m.Partner, m.MessageID, m.IdempotencyKey, m.Source, m.ContentType, m.Filename, m.Subject,
			m.Service, m.Action, m.ConversationID, m.Protocol}
	}
	if g, w := f(got), f(want); g != w {
		t.Errorf("%s: message\n got %+v\nwant %+v", what, g, w)
	}
}

// mustState checks a message's state, attempts, last error and reason.
func mustState(t T, c context.Context, s outbound.Store, id string, state outbound.State, attempts int, lastErr, reason, what string) outbound.Message {
	t.Helper()
	m := get(t, c, s, id)
	if m.State != state || m.Attempts != attempts || m.LastError != lastErr || m.Reason != reason {
		t.Errorf("%s: state %q, attempts %d, last error %q, reason %q; want %q, %d, %q, %q", what,
			m.State, m.Attempts, m.LastError, m.Reason, state, attempts, lastErr, reason)
	}
	return m
}

// readAll reads r in reads of at most n bytes.
func readAll(r io.Reader, n int) ([]byte, error) {
	var out bytes.Buffer
	buf := make([]byte, n)
	for {
		k, err := r.Read(buf)
		out.Write(buf[:k])
		if err == io.EOF {
			return out.Bytes(), nil
		}
		if err != nil {
			return out.Bytes(), err
		}
	}
}

// payloadOf reads a message's payload back in small reads.
func payloadOf(t T, c context.Context, s outbound.Store, id string) []byte {
	t.Helper()
	rc, err := s.OpenPayload(c, id)
	if err != nil {
		t.Fatalf("OpenPayload(%s): %v", id, err)
	}
	b, err := readAll(rc, 1021)
	if cerr := rc.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	if err != nil {
		t.Fatalf("reading the payload of %s: %v", id, err)
	}
	return b
}

// chunks is a reader handing out at most n bytes per Read.
type chunks struct {
	r io.Reader
	n int
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(p) > c.n {
		p = p[:c.n]
	}
	return c.r.Read(p)
}

// failing is a payload reader that fails after n bytes.
type failing struct {
	r   io.Reader
	err error
}

func (f *failing) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		return n, f.err
	}
	return n, err
}

// unread is a payload reader that must not be read.
type unread struct {
	t    T
	what string
}

func (u unread) Read(p []byte) (int, error) {
	u.t.Errorf("%s: the payload was read", u.what)
	return 0, errors.New("outboundtest: this payload must not be read")
}

// testEvidence returns an MDN-like evidence with a binary body.
func testEvidence(disposition string) *outbound.Evidence {
	return &outbound.Evidence{
		Kind:        "mdn",
		ContentType: `multipart/signed; protocol="application/pkcs7-signature"; micalg=sha-256; boundary="b"`,
		Body:        []byte("--b\r\nContent-Type: message/disposition-notification\r\n\r\n\x00\xff\xfe " + disposition + "\r\n--b--\r\n"),
		Disposition: disposition,
		Signer:      "CN=Partner Ünï, serial 0x1f",
		Received:    time.Date(2026, 3, 1, 12, 30, 45, 123000000, time.UTC),
	}
}

// sameEvidence wants got to be want byte for byte (nil: none).
func sameEvidence(t T, got, want *outbound.Evidence, what string) {
	t.Helper()
	if got == nil || want == nil {
		if got != want {
			t.Errorf("%s: evidence %+v, want %+v", what, got, want)
		}
		return
	}
	if got.Kind != want.Kind || got.ContentType != want.ContentType || got.Disposition != want.Disposition ||
		got.Signer != want.Signer || !bytes.Equal(got.Body, want.Body) || !near(got.Received, want.Received, timeSlack) {
		t.Errorf("%s: evidence\n got %+v\nwant %+v", what, *got, *want)
	}
}

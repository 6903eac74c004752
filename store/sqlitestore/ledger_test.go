package sqlitestore_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/dedup/deduptest"
	"github.com/edigateway/gateway/outbox"
	"github.com/edigateway/gateway/store/sqlitestore"
)

// sharedLedgers opens one database file per lease setting for a whole
// top-level test: the ledger kit's checks do not disturb each other.
func sharedLedgers(t *testing.T) deduptest.NewLedger {
	dir := t.TempDir()
	var mu sync.Mutex
	stores := map[dedup.Options]*sqlitestore.Store{}
	t.Cleanup(func() {
		for _, s := range stores {
			s.Close()
		}
	})
	return func(tb testing.TB, opts dedup.Options) dedup.Ledger {
		mu.Lock()
		defer mu.Unlock()
		if s, ok := stores[opts]; ok {
			return s
		}
		s, err := sqlitestore.Open(context.Background(), filepath.Join(dir, opts.Lease.String()+".db"), opts)
		if err != nil {
			tb.Fatalf("Open: %v", err)
		}
		stores[opts] = s
		return s
	}
}

func TestLedgerContract(t *testing.T) {
	t.Parallel()
	deduptest.ExerciseLedger(t, sharedLedgers(t))
}

// TestLedgerContractTwoHandles runs the ledger kit against two Store handles
// on one file used alternately, as two gateway processes would.
func TestLedgerContractTwoHandles(t *testing.T) {
	t.Parallel()
	deduptest.ExerciseLedger(t, func(t testing.TB, opts dedup.Options) dedup.Ledger {
		path := filepath.Join(t.TempDir(), "ledger.db")
		return &alternateLedger{ls: []dedup.Ledger{open(t, path, opts), open(t, path, opts)}}
	})
}

// alternateLedger sends each call to the next of its ledgers.
type alternateLedger struct {
	mu sync.Mutex
	n  int
	ls []dedup.Ledger
}

func (a *alternateLedger) next() dedup.Ledger {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n++
	return a.ls[a.n%len(a.ls)]
}

func (a *alternateLedger) ClaimInterchange(ctx context.Context, c dedup.InterchangeClaim) (dedup.Decision, error) {
	return a.next().ClaimInterchange(ctx, c)
}
func (a *alternateLedger) AcceptInterchange(ctx context.Context, k dedup.Key, tok dedup.Token) error {
	return a.next().AcceptInterchange(ctx, k, tok)
}
func (a *alternateLedger) AbandonInterchange(ctx context.Context, k dedup.Key, tok dedup.Token) error {
	return a.next().AbandonInterchange(ctx, k, tok)
}
func (a *alternateLedger) Interchange(ctx context.Context, k dedup.Key) (dedup.InterchangeRecord, error) {
	return a.next().Interchange(ctx, k)
}
func (a *alternateLedger) FindInterchanges(ctx context.Context, q dedup.InterchangeQuery) ([]dedup.InterchangeRecord, error) {
	return a.next().FindInterchanges(ctx, q)
}
func (a *alternateLedger) ExpiredInterchanges(ctx context.Context, before time.Time, limit int) ([]dedup.InterchangeRecord, error) {
	return a.next().ExpiredInterchanges(ctx, before, limit)
}
func (a *alternateLedger) DeleteInterchanges(ctx context.Context, recs []dedup.InterchangeRecord) (int64, error) {
	return a.next().DeleteInterchanges(ctx, recs)
}
func (a *alternateLedger) ReplacedInterchanges(ctx context.Context, q dedup.InterchangeQuery) ([]dedup.InterchangeRecord, error) {
	return a.next().ReplacedInterchanges(ctx, q)
}
func (a *alternateLedger) DeleteReplaced(ctx context.Context, recs []dedup.InterchangeRecord) (int64, error) {
	return a.next().DeleteReplaced(ctx, recs)
}

func TestOutboxContract(t *testing.T) {
	t.Parallel()
	deduptest.ExerciseOutbox(t, func(t testing.TB) outbox.Store {
		return open(t, filepath.Join(t.TempDir(), "outbox.db"), dedup.Options{}).Outbox()
	})
}

func TestLedgerAndOutboxSurviveReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gw.db")
	s, err := sqlitestore.Open(ctx, path, dedup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ic := deduptest.NewInterchange(t)
	d, err := s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: "h", MessageID: "m1", Window: time.Hour})
	if err != nil || d.Outcome != dedup.Claimed {
		t.Fatalf("claim: %+v %v", d, err)
	}
	if err := s.AcceptInterchange(ctx, ic.Key, d.Token); err != nil {
		t.Fatal(err)
	}
	queued, leased := deduptest.NewDelivery(t), deduptest.NewDelivery(t)
	for _, del := range []outbox.Delivery{leased, queued} {
		if err := s.Outbox().Enqueue(ctx, del); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Millisecond)
	}
	if got, err := s.Outbox().Lease(ctx, 1, time.Hour); err != nil || len(got) != 1 || got[0].ID != leased.ID {
		t.Fatalf("lease before restart: %v %v", got, err)
	}
	s.Close()

	s = open(t, path, dedup.Options{})
	got, err := s.Outbox().Lease(ctx, 10, time.Minute)
	if err != nil || len(got) != 1 || got[0].ID != queued.ID || string(got[0].Body) != string(queued.Body) ||
		got[0].Header.Get("Content-Type") != queued.Header.Get("Content-Type") {
		t.Fatalf("lease after restart: %+v %v; want the queued delivery only (the other is still leased)", got, err)
	}
	d, err = s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: "h2", MessageID: "m2", Window: time.Hour})
	if err != nil || d.Outcome != dedup.Duplicate || d.Retries != 1 || d.PayloadSHA256 != "h" {
		t.Fatalf("duplicate after restart: %+v %v", d, err)
	}
	r, err := s.Interchange(ctx, ic.Key)
	if err != nil || !slices.Equal(r.MessageIDs, []string{"m1", "m2"}) || r.Window != time.Hour {
		t.Fatalf("record after restart: %+v %v", r, err)
	}
	var n int
	for component, want := range map[string]int{"dedup": 5, "ledger": 2, "outbox": 2} {
		if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM gateway_migrations WHERE component = ?`, component).
			Scan(&n); err != nil || n != want {
			t.Errorf("%s: %d migrations recorded, %v; want %d", component, n, err, want)
		}
	}
}

func TestLedgerUnavailable(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "d.db"), dedup.Options{})
	s.Close()
	ic := deduptest.NewInterchange(t)
	if _, err := s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic}); !errors.Is(err, dedup.ErrUnavailable) {
		t.Errorf("ClaimInterchange after Close: %v", err)
	}
	if _, err := s.FindInterchanges(ctx, dedup.InterchangeQuery{}); !errors.Is(err, dedup.ErrUnavailable) {
		t.Errorf("FindInterchanges after Close: %v", err)
	}
	if err := s.Outbox().Enqueue(ctx, deduptest.NewDelivery(t)); !errors.Is(err, dedup.ErrUnavailable) {
		t.Errorf("outbox Enqueue after Close: %v", err)
	}
	if _, err := s.Outbox().Lease(ctx, 1, time.Minute); !errors.Is(err, dedup.ErrUnavailable) {
		t.Errorf("outbox Lease after Close: %v", err)
	}
}

// TestExpiredUsesIndex checks the purge query's plan: the partial index,
// not a scan of the whole ledger.
func TestExpiredUsesIndex(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "d.db"), dedup.Options{})
	for q, index := range map[string]string{
		`SELECT key FROM ledger_interchanges WHERE state <> 'claimed' AND window_ms > 0 AND last_seen < 5
			AND first_seen + window_ms < 10 ORDER BY last_seen, key LIMIT 10`: "ledger_interchanges_expire",
		`SELECT key FROM ledger_interchanges WHERE reference = 'x' ORDER BY first_seen LIMIT 10`:                  "ledger_interchanges_reference",
		`SELECT key FROM ledger_interchanges WHERE partner = 'x' AND last_seen >= 5 ORDER BY first_seen LIMIT 10`: "ledger_interchanges_partner",
		// FindInterchanges by date alone (the console's search): the
		// partial ledger_interchanges_expire holds only finished rows with
		// a window, so this index is needed beside it.
		`SELECT key FROM ledger_interchanges WHERE last_seen >= 5 AND last_seen < 10 ORDER BY first_seen, key LIMIT 10`: "ledger_interchanges_last_seen",
		`SELECT key FROM ledger_history WHERE last_seen >= 5 AND last_seen < 10 ORDER BY replaced_at, key, id LIMIT 10`: "ledger_history_last_seen",
		// Store.Expire
		`SELECT rowid FROM dedup_claims WHERE state <> 'claimed' AND first_seen < 5 LIMIT 10`: "dedup_claims_expire",
		// AuditSink.ByKey and Query by key (migration 0005)
		`SELECT id FROM audit_records WHERE substr(dedup_key, 1, 12) = substr('0123456789abcdef', 1, 12)
			AND dedup_key = '0123456789abcdef' ORDER BY id`: "audit_records_key_prefix",
		`SELECT id FROM outbox_deliveries WHERE state = 'pending' AND next_attempt <= 5 AND leased_until <= 5
			ORDER BY next_attempt, id LIMIT 3`: "outbox_deliveries_due",
	} {
		rows, err := s.DB().QueryContext(ctx, "EXPLAIN QUERY PLAN "+q)
		if err != nil {
			t.Fatal(err)
		}
		var plan string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan += detail + "; "
		}
		rows.Close()
		if !contains(plan, index) {
			t.Errorf("plan of %q: %s; want %s", q, plan, index)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

package pgstore_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/dedup/deduptest"
	"github.com/edigateway/gateway/internal/pgtest"
	"github.com/edigateway/gateway/outbox"
	"github.com/edigateway/gateway/store/pgstore"
)

// sharedLedgers gives the ledger kit one schema for a whole top-level test,
// with one store per lease setting: its checks do not disturb each other.
func sharedLedgers(t *testing.T, pools int) deduptest.NewLedger {
	dsn, schema := pgtest.Schema(t)
	var mu sync.Mutex
	ledgers := map[dedup.Options]dedup.Ledger{}
	return func(tb testing.TB, opts dedup.Options) dedup.Ledger {
		mu.Lock()
		defer mu.Unlock()
		if l, ok := ledgers[opts]; ok {
			return l
		}
		a := &alternateLedger{}
		for range pools {
			a.ls = append(a.ls, open(t, dsn, schema, opts))
		}
		ledgers[opts] = a
		return a
	}
}

func TestLedgerContract(t *testing.T) {
	t.Parallel()
	deduptest.ExerciseLedger(t, sharedLedgers(t, 1))
}

// TestLedgerContractTwoPools runs the ledger kit against two stores (two
// pools) on one schema used alternately, as two gateways of a fleet would.
func TestLedgerContractTwoPools(t *testing.T) {
	t.Parallel()
	deduptest.ExerciseLedger(t, sharedLedgers(t, 2))
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

// TestOutboxContract runs the outbox kit; each check needs an empty outbox,
// so each gets its own schema.
func TestOutboxContract(t *testing.T) {
	t.Parallel()
	deduptest.ExerciseOutbox(t, func(t testing.TB) outbox.Store {
		dsn, schema := pgtest.Schema(t)
		return open(t, dsn, schema, dedup.Options{}).Outbox()
	})
}

// TestOutboxTwoGatewaysLease has two gateways (two pools) lease from one
// queue concurrently: FOR UPDATE SKIP LOCKED hands each delivery to one.
func TestOutboxTwoGatewaysLease(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	a, b := open(t, dsn, schema, dedup.Options{}).Outbox(), open(t, dsn, schema, dedup.Options{}).Outbox()
	const n = 200
	for range n {
		if err := a.Enqueue(ctx, deduptest.NewDelivery(t)); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
	)
	for i := range 8 {
		o := a
		if i%2 == 1 {
			o = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				got, err := o.Lease(ctx, 5, time.Hour)
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, d := range got {
					seen[d.ID]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Errorf("%d of %d deliveries leased", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("delivery %s leased %d times", id, k)
		}
	}
}

func TestLedgerAndOutboxSurviveReopen(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	s, err := pgstore.Open(ctx, dsn, dedup.Options{}, pgstore.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	ic := deduptest.NewInterchange(t)
	d, err := s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: "h", MessageID: "m1", Window: 30 * 24 * time.Hour})
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
	}
	if got, err := s.Outbox().Lease(ctx, 1, time.Hour); err != nil || len(got) != 1 || got[0].ID != leased.ID {
		t.Fatalf("lease before restart: %v %v", got, err)
	}
	s.Close()

	s = open(t, dsn, schema, dedup.Options{})
	got, err := s.Outbox().Lease(ctx, 10, time.Minute)
	if err != nil || len(got) != 1 || got[0].ID != queued.ID || string(got[0].Body) != string(queued.Body) ||
		got[0].Header.Get("Content-Type") != queued.Header.Get("Content-Type") {
		t.Fatalf("lease after restart: %+v %v; want the queued delivery only (the other is still leased)", got, err)
	}
	d, err = s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: "h2", MessageID: "m2", Window: 30 * 24 * time.Hour})
	if err != nil || d.Outcome != dedup.Duplicate || d.Retries != 1 || d.PayloadSHA256 != "h" {
		t.Fatalf("duplicate after restart: %+v %v", d, err)
	}
	r, err := s.Interchange(ctx, ic.Key)
	if err != nil || !slices.Equal(r.MessageIDs, []string{"m1", "m2"}) || r.Window != 30*24*time.Hour {
		t.Fatalf("record after restart: %+v %v", r, err)
	}
	for component, want := range map[string]int{"dedup": 4, "ledger": 2, "outbox": 2} {
		var n int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "gateway_migrations"}.Sanitize()+
			` WHERE component = $1`, component).Scan(&n); err != nil || n != want {
			t.Errorf("%s: %d migrations recorded, %v; want %d", component, n, err, want)
		}
	}
}

func TestLedgerUnavailable(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	s := open(t, dsn, schema, dedup.Options{})
	s.Close()
	if _, err := s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: deduptest.NewInterchange(t)}); !errors.Is(err, dedup.ErrUnavailable) {
		t.Errorf("ClaimInterchange after Close: %v", err)
	}
	if _, err := s.ExpiredInterchanges(ctx, time.Now(), 1); !errors.Is(err, dedup.ErrUnavailable) {
		t.Errorf("ExpiredInterchanges after Close: %v", err)
	}
	if err := s.Outbox().Enqueue(ctx, deduptest.NewDelivery(t)); !errors.Is(err, dedup.ErrUnavailable) {
		t.Errorf("outbox Enqueue after Close: %v", err)
	}
	if _, err := s.Outbox().Lease(ctx, 1, time.Minute); !errors.Is(err, dedup.ErrUnavailable) {
		t.Errorf("outbox Lease after Close: %v", err)
	}
}

// TestLedgerQueriesUseIndexes checks the plans of the evidence and purge
// queries on a ledger large enough for the planner to prefer an index.
func TestLedgerQueriesUseIndexes(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	s := open(t, dsn, schema, dedup.Options{})
	table := pgx.Identifier{schema, "ledger_interchanges"}.Sanitize()
	if _, err := s.Pool().Exec(ctx, `INSERT INTO `+table+` (key, partner, reference, state, token, first_seen,
	last_seen, lease_until, window_us, message_ids)
SELECT md5('k' || i) || md5('l' || i), 'partner' || (i % 50), lpad(i::text, 14, '0'), 'accepted', 't',
	now() - interval '40 days' + i * interval '1 second', now() - interval '40 days' + i * interval '1 second', now(),
	CASE WHEN i % 10 = 0 THEN 0 ELSE 604800000000 END, ARRAY['<m' || i || '@bench>']
FROM generate_series(1, 20000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `ANALYZE `+table); err != nil {
		t.Fatal(err)
	}
	for q, index := range map[string]string{
		`SELECT key FROM ` + table + ` WHERE state <> 'claimed' AND window_us > 0 AND last_seen < now() - interval '39 days'
			AND first_seen + window_us * interval '1 microsecond' < now() ORDER BY last_seen, key LIMIT 100`: "ledger_interchanges_expire",
		`SELECT key FROM ` + table + ` WHERE reference = '00000000001234' ORDER BY first_seen LIMIT 10`:              "ledger_interchanges_reference",
		`SELECT key FROM ` + table + ` WHERE message_ids @> ARRAY['<m77@bench>'::text] ORDER BY first_seen LIMIT 10`: "ledger_interchanges_message_ids",
		`SELECT key FROM ` + table + ` WHERE partner = 'partner7' AND last_seen >= now() - interval '39 days 23 hours'
			ORDER BY first_seen LIMIT 10`: "ledger_interchanges_partner",
	} {
		rows, err := s.Pool().Query(ctx, "EXPLAIN "+q)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		plan := strings.Join(lines, "\n")
		if !strings.Contains(plan, index) {
			t.Errorf("plan does not use %s:\n%s", index, plan)
		}
	}
}

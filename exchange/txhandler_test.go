package exchange

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/internal/pgtest"
	"github.com/edigateway/gateway/store/pgstore"
	"github.com/edigateway/gateway/store/sqlitestore"
)

// txStore is what the transactional tests need of a SQL store.
type txStore interface {
	dedup.Store
	dedup.Ledger
	dedup.TxAcceptor
}

// txFixture is a pipeline with a TxHandler writing one row per payload to
// the table tx_rows of the store's database.
type txFixture struct {
	t     *testing.T
	st    txStore
	audit interface {
		ByKey(context.Context, string) ([]audit.Record, error)
	}
	p     *Pipeline
	proto *testProtocol
	calls atomic.Int64
	fail  atomic.Bool // the handler writes its rows, then fails
	count func(msgKey string) int
}

func insertRow(ctx context.Context, tx Tx, msgKey, payloadKey string) error {
	if s := tx.SQLTx(); s != nil {
		_, err := s.ExecContext(ctx, `INSERT INTO tx_rows (msg_key, payload_key) VALUES (?, ?)`, msgKey, payloadKey)
		return err
	}
	_, err := tx.PgxTx().Exec(ctx, `INSERT INTO tx_rows (msg_key, payload_key) VALUES ($1, $2)`, msgKey, payloadKey)
	return err
}

func txBackends(t *testing.T) map[string]func(t *testing.T) *txFixture {
	return map[string]func(t *testing.T) *txFixture{
		"sqlite": func(t *testing.T) *txFixture {
			st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "gw.db"), dedup.Options{Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			if _, err := st.DB().Exec(`CREATE TABLE tx_rows (msg_key TEXT NOT NULL, payload_key TEXT NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			f := newTxFixture(t, st, st.Audit(), st.AuditSink())
			f.count = func(k string) int {
				var n int
				if err := st.DB().QueryRow(`SELECT count(*) FROM tx_rows WHERE msg_key = ?`, k).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			return f
		},
		"postgres": func(t *testing.T) *txFixture {
			dsn, schema := pgtest.Schema(t)
			st, err := pgstore.Open(context.Background(), dsn, dedup.Options{Lease: time.Minute}, pgstore.WithSchema(schema))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			table := pgx.Identifier{schema, "tx_rows"}.Sanitize()
			if _, err := st.Pool().Exec(context.Background(), `CREATE TABLE `+table+` (msg_key text NOT NULL, payload_key text NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			f := newTxFixture(t, st, st.Audit(), st.AuditSink())
			// The handler's statements name the table unqualified.
			f.p.TxHandler = TxHandlerFunc(func(ctx context.Context, tx Tx, m *Message) error {
				if _, err := tx.PgxTx().Exec(ctx, `SET LOCAL search_path TO `+pgx.Identifier{schema}.Sanitize()); err != nil {
					return err
				}
				return f.handle(ctx, tx, m)
			})
			f.count = func(k string) int {
				var n int
				if err := st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM `+table+` WHERE msg_key = $1`, k).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			return f
		},
	}
}

func newTxFixture(t *testing.T, st txStore, reader interface {
	ByKey(context.Context, string) ([]audit.Record, error)
}, sink audit.Sink) *txFixture {
	f := &txFixture{t: t, st: st, audit: reader, proto: &testProtocol{}}
	f.p = &Pipeline{Store: st, Ledger: st, Audit: sink, Lease: time.Minute, Log: slog.New(slog.DiscardHandler)}
	f.p.TxHandler = TxHandlerFunc(f.handle)
	return f
}

func (f *txFixture) handle(ctx context.Context, tx Tx, m *Message) error {
	f.calls.Add(1)
	for _, p := range m.Payloads {
		if err := insertRow(ctx, tx, m.IdempotencyKey, p.IdempotencyKey); err != nil {
			return err
		}
	}
	if f.fail.Load() {
		return errors.New("ERP rejected the invoice after the rows were written")
	}
	return nil
}

// hookReplies runs before() when the pipeline builds the positive reply,
// which it does before the accept transaction.
type hookReplies struct {
	dupReplies
	before func()
}

func (r hookReplies) Accepted(ctx context.Context) (Reply, error) {
	if r.before != nil {
		r.before()
	}
	return r.dupReplies.Accepted(ctx)
}

func (f *txFixture) send(id, payload string, before func()) (Reply, *Message) {
	in := f.proto.inbound("acme", id, payload)
	in.Replies = hookReplies{dupReplies{in.Replies.(testReplies)}, before}
	return f.p.Process(context.Background(), in), in.Message
}

func (f *txFixture) steps(key dedup.Key) string {
	recs, err := f.audit.ByKey(context.Background(), string(key))
	if err != nil {
		f.t.Fatal(err)
	}
	return stepList(recs)
}

// stepList is "step[:decision]" of each record, comma-separated.
func stepList(recs []audit.Record) string {
	var out []string
	for _, r := range recs {
		s := string(r.Step)
		if r.Decision != "" {
			s += ":" + r.Decision
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}

func TestTxHandlerRowsCommitWithTheAccept(t *testing.T) {
	for name, open := range txBackends(t) {
		t.Run(name, func(t *testing.T) {
			f := open(t)
			ctx := context.Background()
			r1, m := f.send("m1", invoic("TXREF1", "A"), nil)
			if r1.Status != 200 || r1.Disposition != "processed" {
				t.Fatalf("first delivery: %d %s %s", r1.Status, r1.Disposition, r1.Body)
			}
			if n := f.count(m.IdempotencyKey); n != 1 {
				t.Fatalf("%d handler rows after accept, want 1", n)
			}
			ic, err := f.st.Interchange(ctx, m.Interchanges[0].Key)
			if err != nil || ic.State != "accepted" {
				t.Fatalf("interchange %+v %v", ic, err)
			}
			if got := f.steps(m.TransportKey); got != "received,decision:new,decision:new-interchange,handler:ok,reply:accepted" {
				t.Errorf("audit %s", got)
			}
			// A retransmission is answered from the stored reply; the handler does not run.
			r2, _ := f.send("m1", invoic("TXREF1", "A"), nil)
			if r2.Status != 200 || string(r2.Body) != string(r1.Body) || f.calls.Load() != 1 || f.count(m.IdempotencyKey) != 1 {
				t.Fatalf("duplicate: %d %q, handler calls %d, rows %d", r2.Status, r2.Body, f.calls.Load(), f.count(m.IdempotencyKey))
			}
			// The interchange under a new message id is a duplicate too.
			r3, m3 := f.send("m2", invoic("TXREF1", "A"), nil)
			if r3.Status != 200 || f.calls.Load() != 1 || f.count(m3.IdempotencyKey) != 0 {
				t.Fatalf("resent interchange: %d %q, handler calls %d", r3.Status, r3.Body, f.calls.Load())
			}
		})
	}
}

func TestTxHandlerErrorRollsBackAndAbandons(t *testing.T) {
	for name, open := range txBackends(t) {
		t.Run(name, func(t *testing.T) {
			f := open(t)
			f.fail.Store(true)
			r1, m := f.send("m1", invoic("TXREF2", "A"), nil)
			if r1.Status != 200 || !strings.Contains(string(r1.Body), "failed kind=1") {
				t.Fatalf("failing handler: %d %s", r1.Status, r1.Body)
			}
			if n := f.count(m.IdempotencyKey); n != 0 {
				t.Fatalf("%d rows of a failed handler survived", n)
			}
			ic, err := f.st.Interchange(context.Background(), m.Interchanges[0].Key)
			if err != nil || ic.State != "abandoned" {
				t.Fatalf("interchange after handler failure: %+v %v", ic, err)
			}
			// The claim was abandoned: the retransmission runs the handler anew.
			f.fail.Store(false)
			r2, _ := f.send("m1", invoic("TXREF2", "A"), nil)
			if r2.Status != 200 || r2.Disposition != "processed" || f.calls.Load() != 2 || f.count(m.IdempotencyKey) != 1 {
				t.Fatalf("retransmission: %d %s, calls %d, rows %d", r2.Status, r2.Body, f.calls.Load(), f.count(m.IdempotencyKey))
			}
		})
	}
}

func TestTxHandlerPanicRollsBack(t *testing.T) {
	for name, open := range txBackends(t) {
		t.Run(name, func(t *testing.T) {
			f := open(t)
			inner := f.p.TxHandler
			f.p.TxHandler = TxHandlerFunc(func(ctx context.Context, tx Tx, m *Message) error {
				if err := inner.HandleTx(ctx, tx, m); err != nil {
					return err
				}
				panic("handler bug")
			})
			r, m := f.send("m1", "plain text", nil)
			if !strings.Contains(string(r.Body), "failed kind=1") || f.count(m.IdempotencyKey) != 0 {
				t.Fatalf("panicking handler: %d %s, rows %d", r.Status, r.Body, f.count(m.IdempotencyKey))
			}
		})
	}
}

// The claim is taken over (its lease ran out and another gateway claimed
// the key) between the claim and the accept: the accept's compare-and-set
// fails, the handler does not run, no row and no positive reply.
func TestTxHandlerStaleClaimWritesNothing(t *testing.T) {
	for name, open := range txBackends(t) {
		t.Run(name, func(t *testing.T) {
			f := open(t)
			key := dedup.TransportKey("test", "t", "acme", "m1")
			ctx := context.Background()
			takeover := func() {
				// What a takeover does to the row: our token no longer holds it.
				d, err := f.st.Claim(ctx, dedup.ClaimRequest{Key: key})
				if err != nil || d.Outcome != dedup.InFlight {
					t.Fatalf("claim while held: %+v %v", d, err)
				}
				if ss, ok := f.st.(interface{ DB() *sql.DB }); ok {
					if _, err := ss.DB().Exec(`UPDATE dedup_claims SET token = 'other' WHERE key = ?`, string(key)); err != nil {
						t.Fatal(err)
					}
					return
				}
				ps := f.st.(*pgstore.Store)
				if _, err := ps.Pool().Exec(ctx, `UPDATE `+pgx.Identifier{ps.Schema(), "dedup_claims"}.Sanitize()+` SET token = 'other' WHERE key = $1`, string(key)); err != nil {
					t.Fatal(err)
				}
			}
			r, m := f.send("m1", "plain text", takeover)
			if r.Status != 503 || f.calls.Load() != 0 || f.count(m.IdempotencyKey) != 0 {
				t.Fatalf("stale claim: %d %s, calls %d, rows %d", r.Status, r.Body, f.calls.Load(), f.count(m.IdempotencyKey))
			}
			// The store-level contract: fn is not run and the error is ErrStaleClaim.
			ran := false
			err := f.st.AcceptTx(ctx, key, "not-the-token", nil, func(ctx context.Context, tx dedup.Tx) error { ran = true; return nil })
			if !errors.Is(err, dedup.ErrStaleClaim) || ran {
				t.Fatalf("AcceptTx with a stale token: %v, fn ran %v", err, ran)
			}
		})
	}
}

// A failure after the handler inside the transaction (here the commit of
// writes that violate a constraint) leaves neither the rows nor the accept.
func TestAcceptTxCallbackErrorLeavesClaimHeld(t *testing.T) {
	for name, open := range txBackends(t) {
		t.Run(name, func(t *testing.T) {
			f := open(t)
			ctx := context.Background()
			key := dedup.TransportKey("test", "t", "acme", "m9")
			d, err := f.st.Claim(ctx, dedup.ClaimRequest{Key: key})
			if err != nil {
				t.Fatal(err)
			}
			boom := errors.New("boom")
			err = f.st.AcceptTx(ctx, key, d.Token, []byte("reply"), func(ctx context.Context, tx dedup.Tx) error {
				if s := tx.SQLTx(); s != nil {
					if _, err := s.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS tx_rows (msg_key TEXT, payload_key TEXT)`); err != nil {
						return err
					}
				} else if _, err := tx.PgxTx().Exec(ctx, `SELECT 1`); err != nil {
					return err
				}
				// Store writes with the callback's ctx join the transaction.
				if err := f.p.Audit.Write(ctx, audit.Record{Key: string(key), Step: audit.StepHandler, Decision: "ok"}); err != nil {
					return err
				}
				return boom
			})
			if !errors.Is(err, boom) {
				t.Fatalf("AcceptTx: %v", err)
			}
			if got := f.steps(key); got != "" {
				t.Fatalf("audit record of a rolled back transaction survived: %s", got)
			}
			// Still held by d.Token: a claim is in flight, and the holder can abandon.
			if d2, err := f.st.Claim(ctx, dedup.ClaimRequest{Key: key}); err != nil || d2.Outcome != dedup.InFlight {
				t.Fatalf("after rollback: %+v %v", d2, err)
			}
			if err := f.st.Abandon(ctx, key, d.Token); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestTxHandlerNeedsATxAcceptor(t *testing.T) {
	p, _, _ := newPipeline(nil)
	p.TxHandler = TxHandlerFunc(func(ctx context.Context, tx Tx, m *Message) error { t.Error("ran"); return nil })
	if err := p.CheckTxHandler(); !errors.Is(err, ErrNoTxAcceptor) {
		t.Fatalf("CheckTxHandler on the memory store: %v", err)
	}
	proto := &testProtocol{}
	if r := p.Process(context.Background(), proto.inbound("acme", "m1", "x")); r.Status != 500 {
		t.Fatalf("Process: %d %s", r.Status, r.Body)
	}
}

// The handler's context carries the transaction and ends inside the lease.
func TestTxHandlerContextEndsInsideTheLease(t *testing.T) {
	f := txBackends(t)["sqlite"](t)
	f.p.Lease = 10 * time.Second
	var deadline time.Time
	var ok bool
	start := time.Now()
	f.p.TxHandler = TxHandlerFunc(func(ctx context.Context, tx Tx, m *Message) error {
		deadline, ok = ctx.Deadline()
		// A store write with the handler's ctx joins the transaction (with
		// one SQLite connection, it would otherwise wait for it forever).
		return f.p.Audit.Write(ctx, audit.Record{Key: string(m.TransportKey), Step: "test"})
	})
	r, _ := f.send("m1", "x", nil)
	if r.Status != 200 || !ok || deadline.After(start.Add(f.p.Lease)) || deadline.Before(start.Add(f.p.Lease/2)) {
		t.Fatalf("reply %d; handler deadline %v (set %v), lease ends %v", r.Status, deadline, ok, start.Add(f.p.Lease))
	}
}

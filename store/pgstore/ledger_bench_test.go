package pgstore_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/dedup/deduptest"
	"github.com/edigateway/gateway/internal/pgtest"
	"github.com/edigateway/gateway/store/pgstore"
)

// benchWindow is the window of the loaded interchanges and of the claims:
// every loaded row is inside it, so a claim of one is a Duplicate.
const benchWindow = 30 * 24 * time.Hour

// benchKey is the key the bulk load gives row i (md5('k'||i) || md5('l'||i)).
func benchKey(i int) dedup.Key {
	a, b := md5.Sum([]byte("k"+strconv.Itoa(i))), md5.Sum([]byte("l"+strconv.Itoa(i)))
	return dedup.Key(hex.EncodeToString(a[:]) + hex.EncodeToString(b[:]))
}

// loadLedger opens a store on a schema of its own holding rows accepted
// interchanges, first seen over the last 20 days, each with one message id.
// The rows go in with one INSERT … SELECT generate_series with the secondary
// indexes dropped and rebuilt after (as a restore would), then the table is
// vacuumed and analysed.
func loadLedger(b *testing.B, rows int) *pgstore.Store {
	b.Helper()
	ctx := context.Background()
	dsn, schema := pgtest.Schema(b)
	s, err := pgstore.Open(ctx, dsn, dedup.Options{}, pgstore.WithSchema(schema))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	table := pgx.Identifier{schema, "ledger_interchanges"}.Sanitize()
	start := time.Now()
	r, err := s.Pool().Query(ctx, `SELECT indexname, indexdef FROM pg_indexes
WHERE schemaname = $1 AND tablename = 'ledger_interchanges' AND indexname <> 'ledger_interchanges_pkey'`, schema)
	if err != nil {
		b.Fatal(err)
	}
	type index struct{ Name, Def string }
	indexes, err := pgx.CollectRows(r, pgx.RowToStructByPos[index])
	if err != nil || len(indexes) != 5 {
		b.Fatalf("secondary indexes %v: %v", indexes, err)
	}
	for _, ix := range indexes {
		if _, err := s.Pool().Exec(ctx, `DROP INDEX `+pgx.Identifier{schema, ix.Name}.Sanitize()); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := s.Pool().Exec(ctx, `INSERT INTO `+table+` (key, partner, standard, sender, recipient, reference, date,
	type, state, token, payload_sha256, first_seen, last_seen, lease_until, window_us, retries, message_ids, accepted_at)
SELECT md5('k' || i) || md5('l' || i), 'partner' || (i % 50), 'EDIFACT', 'SENDER' || (i % 50) || ':14', 'GATEWAY:ZZ',
	lpad(i::text, 14, '0'), '260301:1200', 'INVOIC', 'accepted', md5('t' || i), md5('p' || i) || md5('q' || i),
	f, f, f + interval '5 minutes', $2::bigint, 0, ARRAY['<m' || i || '@bench.example>'], f
FROM generate_series(1, $1::int) i, LATERAL (SELECT now() - (i % 1728000) * interval '1 second' AS f) t`,
		rows, benchWindow.Microseconds()); err != nil {
		b.Fatal(err)
	}
	loaded := time.Since(start)
	for _, ix := range indexes {
		if _, err := s.Pool().Exec(ctx, ix.Def); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := s.Pool().Exec(ctx, `VACUUM ANALYZE `+table); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d rows: loaded in %v, indexed, vacuumed and analysed in %v", rows, loaded.Round(time.Millisecond),
		time.Since(start).Round(time.Millisecond))
	return s
}

// BenchmarkLedgerClaim measures the business ledger's claim on PostgreSQL
// with 10 k and 1 M interchanges already in the ledger:
//
//	new        ClaimInterchange of a new interchange (one INSERT … ON CONFLICT)
//	           plus its AcceptInterchange: two statements, two round trips
//	duplicate  ClaimInterchange of a loaded, accepted interchange under a new
//	           message id: the upsert that takes nothing over, then the
//	           evidence UPDATE … RETURNING (last seen, retries + 1, the id)
//
// Loading 1 M rows takes about half a minute; -short skips that size.
// Benchmarks never run in go test ./...:
//
//	go test ./store/pgstore -run '^$' -bench BenchmarkLedgerClaim
func BenchmarkLedgerClaim(b *testing.B) {
	for _, size := range []struct {
		name string
		rows int
	}{{"rows=10k", 10_000}, {"rows=1M", 1_000_000}} {
		b.Run(size.name, func(b *testing.B) {
			if size.rows > 100_000 && testing.Short() {
				b.Skip("-short: not loading 1 M rows")
			}
			s := loadLedger(b, size.rows)
			ctx := context.Background()
			hash := deduptest.PayloadHash("invoice")
			b.Run("new", func(b *testing.B) {
				ics := make([]dedup.Interchange, b.N)
				for i := range ics {
					ics[i] = deduptest.NewInterchange(b)
				}
				b.ResetTimer()
				for i := range b.N {
					d, err := s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ics[i], PayloadSHA256: hash,
						MessageID: "<new" + strconv.Itoa(i) + "@bench.example>", Window: benchWindow})
					if err != nil || d.Outcome != dedup.Claimed {
						b.Fatalf("claim: %v %v", d.Outcome, err)
					}
					if err := s.AcceptInterchange(ctx, ics[i].Key, d.Token); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				// Keep the ledger at its size for the next round.
				keys := make([]string, len(ics))
				for i, ic := range ics {
					keys[i] = string(ic.Key)
				}
				if _, err := s.Pool().Exec(ctx, `DELETE FROM `+pgx.Identifier{s.Schema(), "ledger_interchanges"}.Sanitize()+
					` WHERE key = ANY($1)`, keys); err != nil {
					b.Fatal(err)
				}
			})
			b.Run("duplicate", func(b *testing.B) {
				rng := rand.New(rand.NewPCG(uint64(b.N), uint64(size.rows)))
				keys := make([]dedup.Interchange, b.N)
				for i := range keys {
					keys[i] = dedup.Interchange{Key: benchKey(1 + rng.IntN(size.rows))}
				}
				b.ResetTimer()
				for i := range b.N {
					d, err := s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: keys[i], PayloadSHA256: hash,
						MessageID: fmt.Sprintf("<dup%d.%d@bench.example>", b.N, i), Window: benchWindow})
					if err != nil || d.Outcome != dedup.Duplicate {
						b.Fatalf("claim of loaded row %s: %v %v", keys[i].Key, d.Outcome, err)
					}
				}
			})
		})
	}
}

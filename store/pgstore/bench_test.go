package pgstore

import (
	"context"
	"testing"

	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/dedup/deduptest"
	"github.com/edigateway/gateway/internal/pgtest"
)

func benchStore(b *testing.B) (*Store, []dedup.Key) {
	b.Helper()
	dsn, schema := pgtest.Schema(b)
	s, err := Open(context.Background(), dsn, dedup.Options{}, WithSchema(schema))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	keys := make([]dedup.Key, b.N)
	for i := range keys {
		keys[i] = deduptest.NewKey(b)
	}
	return s, keys
}

var (
	benchReply = make([]byte, 1024)
	benchHash  = deduptest.PayloadHash("payload")
)

// BenchmarkClaimAccept measures one claim of a new key plus its accept
// through the store API.
func BenchmarkClaimAccept(b *testing.B) {
	ctx := context.Background()
	s, keys := benchStore(b)
	b.ResetTimer()
	for i := range b.N {
		d, err := s.Claim(ctx, dedup.ClaimRequest{Key: keys[i], PayloadSHA256: benchHash})
		if err != nil || d.Outcome != dedup.Claimed {
			b.Fatalf("claim: %v %v", d.Outcome, err)
		}
		if err := s.Accept(ctx, keys[i], d.Token, benchReply); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawPgx runs the same two statements (the store's own claim and
// accept SQL) straight through the pgx pool, with the same token generation:
// the floor the store's overhead is measured against.
func BenchmarkRawPgx(b *testing.B) {
	ctx := context.Background()
	s, keys := benchStore(b)
	pool, leaseUS := s.pool, ceilUS(s.lease)
	b.ResetTimer()
	for i := range b.N {
		token, err := dedup.NewToken()
		if err != nil {
			b.Fatal(err)
		}
		var (
			got       string
			takenFrom *string
			first     any
		)
		if err := pool.QueryRow(ctx, s.q.claim, string(keys[i]), string(token), benchHash, leaseUS, int64(0)).
			Scan(&got, &takenFrom, &first); err != nil {
			b.Fatal(err)
		}
		tag, err := pool.Exec(ctx, s.q.accept, string(keys[i]), got, benchReply)
		if err != nil || tag.RowsAffected() != 1 {
			b.Fatalf("accept: %v %v", tag, err)
		}
	}
}

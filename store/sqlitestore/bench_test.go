package sqlitestore_test

import (
	"context"
	"path/filepath"
	"testing"

	"gateway/dedup"
	"gateway/dedup/deduptest"
	"gateway/store/sqlitestore"
)

// BenchmarkClaimAccept measures one claim of a new key plus its accept
// through the store API: two durable (synchronous=FULL) WAL commits per op.
func BenchmarkClaimAccept(b *testing.B) {
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, filepath.Join(b.TempDir(), "bench.db"), dedup.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	keys := make([]dedup.Key, b.N)
	for i := range keys {
		keys[i] = deduptest.NewKey(b)
	}
	reply := make([]byte, 1024)
	hash := deduptest.PayloadHash("payload")
	b.ResetTimer()
	for i := range b.N {
		d, err := s.Claim(ctx, dedup.ClaimRequest{Key: keys[i], PayloadSHA256: hash})
		if err != nil || d.Outcome != dedup.Claimed {
			b.Fatalf("claim: %v %v", d.Outcome, err)
		}
		if err := s.Accept(ctx, keys[i], d.Token, reply); err != nil {
			b.Fatal(err)
		}
	}
}

package sqlitestore_test

import (
	"context"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/dedup/deduptest"
	"github.com/edigateway/gateway/store/sqlitestore"
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

// BenchmarkExchangeWrites8 measures the store writes of one exchange (claim,
// three audit records, accept, audit reply) with 8 exchanges at once, as 8
// partner connections make them; ns/op is wall time per exchange.
func BenchmarkExchangeWrites8(b *testing.B) {
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, filepath.Join(b.TempDir(), "bench.db"), dedup.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	reply := make([]byte, 1024)
	hash := deduptest.PayloadHash("payload")
	sink := s.AuditSink()
	b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := deduptest.NewKey(b)
			rec := audit.Record{Key: string(key), PayloadSHA256: hash, Protocol: "as2", Partner: "bench"}
			for _, step := range []audit.Step{audit.StepReceived, audit.StepDecision} {
				rec.Step = step
				if err := sink.Write(ctx, rec); err != nil {
					b.Fatal(err)
				}
			}
			d, err := s.Claim(ctx, dedup.ClaimRequest{Key: key, PayloadSHA256: hash})
			if err != nil || d.Outcome != dedup.Claimed {
				b.Fatalf("claim: %v %v", d.Outcome, err)
			}
			rec.Step = audit.StepHandler
			if err := sink.Write(ctx, rec); err != nil {
				b.Fatal(err)
			}
			if err := s.Accept(ctx, key, d.Token, reply); err != nil {
				b.Fatal(err)
			}
			rec.Step = audit.StepReply
			if err := sink.Write(ctx, rec); err != nil {
				b.Fatal(err)
			}
		}
	})
}

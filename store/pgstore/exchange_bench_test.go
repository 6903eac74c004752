//go:build unix

package pgstore

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
)

// BenchmarkExchangeTransactions measures the two transactions of one
// exchange as the pipeline runs them on PostgreSQL, 8 exchanges at once:
// the claim (received record, claim, decision record) and the accept
// (accept, handler and reply records). Besides the wall time per exchange
// it reports the CPU time of this process (user + system) per exchange,
// cpu-µs/op: the client's side of the round trips, what the gateway pays.
func BenchmarkExchangeTransactions(b *testing.B) {
	ctx := context.Background()
	s, keys := benchStore(b)
	sink := s.Audit()
	rec := func(key dedup.Key, step audit.Step) audit.Record {
		return audit.Record{Time: time.Now(), Step: step, Partner: "bench", Protocol: "as4", MessageID: string(key) + "@bench",
			Key: string(key), Decision: "new", PayloadSHA256: benchHash}
	}
	var next atomic.Int64
	cpu0 := processCPU()
	b.ResetTimer()
	b.SetParallelism(4) // 8 goroutines on 2 cores
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := keys[next.Add(1)-1]
			var d dedup.Decision
			err := s.Atomically(ctx, func(ctx context.Context) error {
				if err := sink.Write(ctx, rec(key, audit.StepReceived)); err != nil {
					return err
				}
				var err error
				if d, err = s.Claim(ctx, dedup.ClaimRequest{Key: key, PayloadSHA256: benchHash}); err != nil {
					return err
				}
				return sink.Write(ctx, rec(key, audit.StepDecision))
			})
			if err != nil || d.Outcome != dedup.Claimed {
				b.Error(err, d.Outcome)
				return
			}
			err = s.Atomically(ctx, func(ctx context.Context) error {
				if err := sink.Write(ctx, rec(key, audit.StepHandler)); err != nil {
					return err
				}
				if err := s.Accept(ctx, key, d.Token, benchReply); err != nil {
					return err
				}
				return sink.Write(ctx, rec(key, audit.StepReply))
			})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// processCPU is this process's user + system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

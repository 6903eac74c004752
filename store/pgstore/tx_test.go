package pgstore_test

import (
	"testing"

	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/dedup/deduptest"
	"github.com/edigateway/gateway/internal/pgtest"
)

func TestTxContract(t *testing.T) {
	t.Parallel()
	deduptest.ExerciseTx(t, func(t testing.TB, opts dedup.Options) dedup.Store {
		dsn, schema := pgtest.Schema(t)
		return open(t, dsn, schema, opts)
	})
}

func TestAtomicContract(t *testing.T) {
	t.Parallel()
	deduptest.ExerciseAtomic(t, func(t testing.TB, opts dedup.Options) dedup.Store {
		dsn, schema := pgtest.Schema(t)
		return open(t, dsn, schema, opts)
	})
}

func TestRenewContract(t *testing.T) {
	t.Parallel()
	deduptest.ExerciseRenew(t, func(t testing.TB, opts dedup.Options) dedup.Store {
		dsn, schema := pgtest.Schema(t)
		return open(t, dsn, schema, opts)
	})
}

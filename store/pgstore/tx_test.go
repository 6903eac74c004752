package pgstore_test

import (
	"testing"

	"gateway/dedup"
	"gateway/dedup/deduptest"
	"gateway/store/pgstore/pgtest"
)

func TestTxContract(t *testing.T) {
	t.Parallel()
	deduptest.ExerciseTx(t, func(t testing.TB, opts dedup.Options) dedup.Store {
		dsn, schema := pgtest.Schema(t)
		return open(t, dsn, schema, opts)
	})
}

package sqlitestore_test

import (
	"path/filepath"
	"testing"

	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/dedup/deduptest"
)

func TestTxContract(t *testing.T) {
	t.Parallel()
	deduptest.ExerciseTx(t, func(t testing.TB, opts dedup.Options) dedup.Store {
		return open(t, filepath.Join(t.TempDir(), "dedup.db"), opts)
	})
}

func TestAtomicContract(t *testing.T) {
	t.Parallel()
	deduptest.ExerciseAtomic(t, func(t testing.TB, opts dedup.Options) dedup.Store {
		return open(t, filepath.Join(t.TempDir(), "dedup.db"), opts)
	})
}

func TestRenewContract(t *testing.T) {
	t.Parallel()
	deduptest.ExerciseRenew(t, func(t testing.TB, opts dedup.Options) dedup.Store {
		return open(t, filepath.Join(t.TempDir(), "dedup.db"), opts)
	})
}

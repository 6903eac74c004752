package sqlitestore

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/edigateway/gateway/audit/audittest"
	"github.com/edigateway/gateway/dedup"
)

func TestAuditQuery(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "a.db"), dedup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	audittest.ExerciseReader(t, s.Audit())
}

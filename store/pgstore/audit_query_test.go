package pgstore

import (
	"context"
	"testing"

	"github.com/edigateway/gateway/audit/audittest"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/internal/pgtest"
)

func TestAuditQuery(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	s, err := Open(context.Background(), dsn, dedup.Options{}, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	audittest.ExerciseReader(t, s.Audit())
}

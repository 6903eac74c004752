package outbox_test

import (
	"testing"

	"github.com/edigateway/gateway/dedup/deduptest"
	"github.com/edigateway/gateway/outbox"
)

// TestMemoryConformance runs the outbox contract kit against the memory outbox.
func TestMemoryConformance(t *testing.T) {
	deduptest.ExerciseOutbox(t, func(testing.TB) outbox.Store { return outbox.NewMemory() })
}

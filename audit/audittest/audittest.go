// Package audittest checks that an audit sink can be read back: every
// record written is returned, byte-exact, by the queries that select it.
package audittest

import (
	"context"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
)

// ReadableSink is a sink that can be queried.
type ReadableSink interface {
	audit.Sink
	audit.Reader
}

// ExerciseReader writes a small set of records and checks every Query filter.
func ExerciseReader(t *testing.T, s ReadableSink) {
	t.Helper()
	ctx := context.Background()
	base := time.Date(2026, 11, 30, 10, 0, 0, 123456000, time.UTC)
	recs := []audit.Record{
		{Time: base, Step: audit.StepReceived, Partner: "acme", Protocol: "as2", MessageID: "m1", Key: "k1", Reference: "R1", PayloadSHA256: "h1"},
		{Time: base.Add(time.Second), Step: audit.StepDecision, Partner: "acme", Protocol: "as2", MessageID: "m1", Key: "k1", Reference: "R1", Decision: "new"},
		{Time: base.Add(time.Hour), Step: audit.StepDecision, Partner: "acme", Protocol: "as2", MessageID: "m2", Key: "k2", Reference: "R1", Decision: "duplicate-interchange", InterchangeKey: "ik"},
		{Time: base.Add(2 * time.Hour), Step: audit.StepReply, Partner: "beta", Protocol: "as4", MessageID: "m1", Key: "k3", Disposition: "receipt", Error: "ünïcode \x01", Incident: "GW-7K3QX9"},
		{Time: base.Add(3 * time.Hour), Step: audit.StepOperator, Partner: "beta", Protocol: "as4", MessageID: "m9", Key: "k9", Decision: "released", Actor: "client certificate CN=ops"},
	}
	for _, r := range recs {
		if err := s.Write(ctx, r); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	for _, tc := range []struct {
		name string
		q    audit.Query
		want []int
	}{
		{"all", audit.Query{}, []int{0, 1, 2, 3, 4}},
		{"partner", audit.Query{Partner: "acme"}, []int{0, 1, 2}},
		{"message", audit.Query{Partner: "acme", MessageID: "m1"}, []int{0, 1}},
		{"message any partner", audit.Query{MessageID: "m1"}, []int{0, 1, 3}},
		{"key", audit.Query{Key: "k2"}, []int{2}},
		{"reference", audit.Query{Reference: "R1"}, []int{0, 1, 2}},
		{"incident", audit.Query{Incident: "GW-7K3QX9"}, []int{3}},
		{"from", audit.Query{From: base.Add(time.Hour)}, []int{2, 3, 4}},
		{"to", audit.Query{To: base.Add(time.Hour)}, []int{0, 1}},
		{"limit", audit.Query{Limit: 2}, []int{0, 1}},
		{"none", audit.Query{Partner: "nobody"}, nil},
	} {
		got, err := s.Query(ctx, tc.q)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(got) != len(tc.want) {
			t.Errorf("%s: %d records, want %d", tc.name, len(got), len(tc.want))
			continue
		}
		for i, idx := range tc.want {
			w := recs[idx]
			g := got[i]
			if !g.Time.Equal(w.Time) || g.Step != w.Step || g.Partner != w.Partner || g.MessageID != w.MessageID ||
				g.Key != w.Key || g.Reference != w.Reference || g.Decision != w.Decision || g.Error != w.Error ||
				g.InterchangeKey != w.InterchangeKey || g.Disposition != w.Disposition || g.PayloadSHA256 != w.PayloadSHA256 ||
				g.Incident != w.Incident || g.Actor != w.Actor {
				t.Errorf("%s: record %d = %+v, want %+v", tc.name, i, g, w)
			}
		}
	}
}

package outboundtest_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/outbound/outboundtest"
)

// leaves are the checks of the kit; the recorder must see each of them.
var leaves = []string{
	"submit/round-trip", "submit/large-payload", "submit/empty-payload", "submit/invalid", "submit/duplicate",
	"submit/idempotent", "submit/idempotent-concurrent", "submit/failed-payload", "submit/properties",
	"lease/due-order", "lease/not-due", "lease/concurrent", "lease/tokens", "lease/expiry", "lease/awaiting-due",
	"renew/keeps", "renew/expired-not-taken",
	"release/due-now",
	"posting/counts",
	"retry/schedules",
	"awaiting/waits",
	"final/delivered", "final/failed",
	"settle/awaiting", "settle/leased", "settle/final", "settle/not-found",
	"find/by-message-id",
	"list/filters", "list/default-limit", "list/same-created",
	"stats/per-partner",
	"cancel/not-final", "cancel/leased", "cancel/final",
	"resend/failed-cancelled", "resend/refused",
	"purge/final-only",
	"unknown/not-found",
	"copies/no-aliasing",
}

// exercise runs the kit on the stores build returns, but for the checks in
// skip.
func exercise(t *testing.T, build func() outbound.Store, skip ...string) *results {
	return record(t, skip, func(rt outboundtest.T) {
		outboundtest.ExerciseT(rt, func(outboundtest.T) outbound.Store { return build() })
	})
}

// mem is Memory with a clock SubmitAt sets, so that every check runs.
func mem() outbound.Store { return outboundtest.NewMemory() }

// TestKitPassesMemory is the control: through the recorder, Memory passes
// every check, and every check ran.
func TestKitPassesMemory(t *testing.T) {
	t.Parallel()
	res := exercise(t, mem)
	for _, name := range res.failing() {
		t.Errorf("%s failed for Memory: %s", name, res.messages(name))
	}
	for _, name := range leaves {
		if !res.didPass(name) {
			t.Errorf("check %s did not run", name)
		}
	}
}

type brokenCase struct {
	name  string
	build func() outbound.Store
	want  []string // checks that must fail
}

// TestKitCatchesBrokenStores runs the kit against stores that each break one
// rule of the contract and asserts that the check for that rule fails
// (others may fail as a consequence; submit/empty-payload, which every one
// of them but one gets right, must pass, so the kit is not failing
// indiscriminately).
func TestKitCatchesBrokenStores(t *testing.T) {
	t.Parallel()
	cases := brokenCases()
	covered := map[string]bool{}
	for _, tc := range cases {
		for _, w := range tc.want {
			covered[w] = true
		}
	}
	for _, leaf := range leaves {
		if !covered[leaf] {
			t.Errorf("no broken store shows that %s can fail", leaf)
		}
	}
	// Each run holds a few 5 MiB payloads: run a few at a time, and skip
	// the 5 MiB check (a second of CPU with -race) where it is not the point.
	all := make([]*results, len(cases))
	took := make([]time.Duration, len(cases))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 10)
	for i, tc := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			start := time.Now()
			var skip []string
			if !slices.Contains(tc.want, "submit/large-payload") {
				skip = []string{"submit/large-payload"}
			}
			all[i] = exercise(t, tc.build, skip...)
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := all[i]
			failing := res.failing()
			for _, w := range tc.want {
				if !slices.Contains(failing, w) {
					t.Errorf("the kit did not report %s for %s; failing checks: %v", w, tc.name, failing)
				}
			}
			if sentinel := "submit/empty-payload"; !slices.Contains(tc.want, sentinel) && !res.didPass(sentinel) {
				t.Errorf("%s failed too: %s", sentinel, res.messages(sentinel))
			}
			for _, name := range failing {
				if !slices.Contains(leaves, name) {
					t.Errorf("failure reported outside a check: %s: %s", name, res.messages(name))
				}
			}
			var lines []string
			for _, name := range failing {
				msg := res.messages(name)
				if len(msg) > 200 {
					msg = msg[:200] + "…"
				}
				lines = append(lines, "  "+name+": "+msg)
			}
			t.Logf("%d of %d checks fail (%v):\n%s", len(failing), len(leaves),
				took[i].Round(time.Millisecond), strings.Join(lines, "\n"))
		})
	}
}

package deduptest_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/dedup/deduptest"
	"github.com/edigateway/gateway/outbox"
)

// ledgerLeaves are the checks of the ledger kit.
var ledgerLeaves = []string{
	"claim/new",
	"duplicate/retries", "duplicate/stored-payload-hash", "duplicate/message-id-cap",
	"in-flight/within-lease",
	"lease/takeover", "lease/late-accept",
	"abandon/reclaim",
	"accept/stale-token",
	"concurrency/one-claim", "concurrency/duplicates-counted",
	"window/reuse", "window/keeps-young", "window/recorded-longer", "window/extended-by-duplicate", "window/recorded-forever", "window/supersede",
	"window/forever",
	"expired/lists-passed-window", "expired/never-forever", "expired/keeps-inside-window",
	"expired/never-claims", "expired/last-seen-before",
	"history/keeps-replaced", "history/supersede", "history/only-accepted", "history/delete",
	"delete/spares-reuse", "delete/removes-listed",
	"find/filters",
	"interchange/not-found",
}

// outboxLeaves are the checks of the outbox kit.
var outboxLeaves = []string{
	"enqueue/round-trip", "enqueue/duplicate-id", "enqueue/invalid",
	"lease/due", "lease/limit-order", "lease/hides-leased", "lease/concurrent",
	"delivered/done",
	"retry/schedules", "retry/clears-lease",
	"give-up/final",
	"get/unknown", "get/copies",
	"operator/retry-now",
	"lease/tokens", "renew/extends", "renew/expired-not-taken", "release/hands-back", "fencing/stale-token",
}

func exerciseLedger(t *testing.T, build func(opts dedup.Options) dedup.Ledger) *results {
	return record(t, func(rt deduptest.T) {
		deduptest.ExerciseLedgerT(rt, func(_ testing.TB, opts dedup.Options) dedup.Ledger { return build(opts) })
	})
}

func exerciseOutbox(t *testing.T, build func() outbox.Store) *results {
	return record(t, func(rt deduptest.T) {
		deduptest.ExerciseOutboxT(rt, func(testing.TB) outbox.Store { return build() })
	})
}

// controlPasses asserts that a correct implementation passes every check and
// that every check ran.
func controlPasses(t *testing.T, res *results, leaves []string) {
	t.Helper()
	for _, name := range res.failing() {
		t.Errorf("%s failed for the memory implementation: %s", name, res.messages(name))
	}
	for _, name := range leaves {
		if !res.didPass(name) {
			t.Errorf("check %s did not run", name)
		}
	}
}

func TestLedgerKitPassesMemoryLedger(t *testing.T) {
	t.Parallel()
	controlPasses(t, exerciseLedger(t, ledgerOf), ledgerLeaves)
}

// TestLedgerKitSharedLedger runs the kit with one ledger per lease setting
// for all subtests, as SQL tests sharing a schema do.
func TestLedgerKitSharedLedger(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	shared := map[dedup.Options]dedup.Ledger{}
	controlPasses(t, exerciseLedger(t, func(o dedup.Options) dedup.Ledger {
		mu.Lock()
		defer mu.Unlock()
		if l, ok := shared[o]; ok {
			return l
		}
		shared[o] = ledgerOf(o)
		return shared[o]
	}), ledgerLeaves)
}

func TestOutboxKitPassesMemoryOutbox(t *testing.T) {
	t.Parallel()
	controlPasses(t, exerciseOutbox(t, func() outbox.Store { return outbox.NewMemory() }), outboxLeaves)
}

type brokenCase[S any] struct {
	name  string
	build S
	want  []string // checks that must fail
}

// assertCaught runs every case at once (each kit run sleeps for leases and
// windows) and asserts that each named check fails, that the first check
// (which every broken implementation gets right) passes, and that failures
// are reported inside checks only.
func assertCaught[S any](t *testing.T, cases []brokenCase[S], run func(S) *results, leaves []string, control string) {
	all := make([]*results, len(cases))
	took := make([]time.Duration, len(cases))
	var wg sync.WaitGroup
	for i, tc := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			all[i] = run(tc.build)
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := all[i]
			failing := res.failing()
			for _, w := range tc.want {
				if !slices.Contains(leaves, w) {
					t.Fatalf("test case names unknown check %s", w)
				}
				if !slices.Contains(failing, w) {
					t.Errorf("the kit did not report %s for %s; failing checks: %v", w, tc.name, failing)
				}
			}
			if !res.didPass(control) {
				t.Errorf("%s failed too: %s", control, res.messages(control))
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

// TestLedgerKitCatchesBrokenLedgers runs the ledger kit against ledgers that
// each break one rule and asserts that the check for that rule fails.
func TestLedgerKitCatchesBrokenLedgers(t *testing.T) {
	t.Parallel()
	type build = func(dedup.Options) dedup.Ledger
	cases := []brokenCase[build]{
		{"never-duplicate", func(o dedup.Options) dedup.Ledger { return neverDuplicateLedger{ledgerOf(o)} },
			[]string{"duplicate/retries", "duplicate/stored-payload-hash", "window/forever"}},
		{"no-retry-count", func(o dedup.Options) dedup.Ledger { return noRetryCount{ledgerOf(o)} },
			[]string{"duplicate/retries", "concurrency/duplicates-counted"}},
		{"request-hash", func(o dedup.Options) dedup.Ledger { return requestHashLedger{ledgerOf(o)} },
			[]string{"duplicate/stored-payload-hash"}},
		{"racy-claim", func(o dedup.Options) dedup.Ledger { return newRacyLedger(o) },
			[]string{"concurrency/one-claim", "concurrency/duplicates-counted"}},
		{"forever-expires", func(o dedup.Options) dedup.Ledger { return foreverExpires{ledgerOf(o)} },
			[]string{"window/forever"}},
		{"ignores-window", func(o dedup.Options) dedup.Ledger { return ignoresWindowLedger{ledgerOf(o)} },
			[]string{"window/reuse"}},
		{"window-of-request-only", func(o dedup.Options) dedup.Ledger { return requestWindowOnly{ledgerOf(o)} },
			[]string{"window/recorded-longer", "window/recorded-forever"}},
		{"window-never-extended", func(o dedup.Options) dedup.Ledger { return windowNeverExtended{ledgerOf(o)} },
			[]string{"window/extended-by-duplicate"}},
		{"ignores-supersede", func(o dedup.Options) dedup.Ledger { return ignoresSupersede{ledgerOf(o)} },
			[]string{"window/supersede"}},
		{"forgets-replaced", func(o dedup.Options) dedup.Ledger { return forgetsReplaced{ledgerOf(o)} },
			[]string{"history/keeps-replaced", "history/supersede"}},
		{"delete-replaced-noop", func(o dedup.Options) dedup.Ledger { return deleteReplacedNoop{ledgerOf(o)} },
			[]string{"history/delete"}},
		{"expire-lists-forever-rows", func(o dedup.Options) dedup.Ledger {
			return expireListsForever{ledgerOf(o), &keyTracker{}}
		}, []string{"expired/never-forever"}},
		{"expire-lists-claims", func(o dedup.Options) dedup.Ledger {
			return &expireListsClaims{Ledger: ledgerOf(o), held: map[dedup.Key]time.Duration{}}
		}, []string{"expired/never-claims"}},
		{"delete-ignores-first-seen", func(o dedup.Options) dedup.Ledger { return deleteIgnoresFirstSeen{ledgerOf(o)} },
			[]string{"delete/spares-reuse"}},
		{"find-ignores-message-id", func(o dedup.Options) dedup.Ledger { return findIgnoresMessageID{ledgerOf(o)} },
			[]string{"find/filters"}},
	}
	assertCaught(t, cases, func(b build) *results { return exerciseLedger(t, b) }, ledgerLeaves, "in-flight/within-lease")
}

// TestOutboxKitCatchesBrokenOutboxes does the same for the outbox kit.
func TestOutboxKitCatchesBrokenOutboxes(t *testing.T) {
	t.Parallel()
	type build = func() outbox.Store
	mem := func() outbox.Store { return outbox.NewMemory() }
	cases := []brokenCase[build]{
		{"lease-ignores-duration", func() outbox.Store { return leaseIgnoresDuration{mem()} },
			[]string{"lease/hides-leased", "lease/concurrent"}},
		{"retry-ignores-next", func() outbox.Store { return retryIgnoresNext{mem()} },
			[]string{"retry/schedules"}},
		{"delivered-noop", func() outbox.Store { return deliveredNoop{mem()} },
			[]string{"delivered/done"}},
		{"give-up-retries", func() outbox.Store { return giveUpRetries{mem()} },
			[]string{"give-up/final"}},
		{"retry-now-noop", func() outbox.Store { return retryNowNoop{outbox.NewMemory()} },
			[]string{"operator/retry-now"}},
		{"renew-noop", func() outbox.Store { return renewNoop{mem()} },
			[]string{"renew/extends", "renew/expired-not-taken", "lease/tokens"}},
		{"release-noop", func() outbox.Store { return releaseNoop{mem()} },
			[]string{"release/hands-back"}},
		{"unfenced", func() outbox.Store { return unfenced{mem()} },
			[]string{"fencing/stale-token"}},
	}
	assertCaught(t, cases, func(b build) *results { return exerciseOutbox(t, b) }, outboxLeaves, "enqueue/round-trip")
}

// retryNowNoop lists pending deliveries but never makes one due.
type retryNowNoop struct{ *outbox.Memory }

func (retryNowNoop) RetryNow(context.Context, string) error { return nil }

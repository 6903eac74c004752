package deduptest_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/dedup/deduptest"
)

// leaves are the checks of the kit; the recorder must see each of them.
var leaves = []string{
	"claim/new-key",
	"duplicate/binary-reply", "duplicate/empty-reply", "duplicate/large-reply",
	"duplicate/stored-payload-hash", "duplicate/reply-is-a-copy",
	"in-flight/within-lease",
	"lease/takeover-new-token", "lease/stale-accept", "lease/stale-abandon", "lease/late-accept-without-takeover",
	"abandon/reclaim", "abandon/accept-after-abandon", "abandon/wrong-token",
	"accept/twice",
	"concurrency/one-claim", "concurrency/many-keys",
	"expire/removes-old-accepted", "expire/keeps-young-accepted", "expire/keeps-claims",
	"window/reuses-old", "window/keeps-young", "window/in-flight-unaffected",
	"keys/independent",
}

func memory(opts dedup.Options) dedup.Store { return dedup.NewMemoryStore(opts) }

func exercise(t *testing.T, build func(opts dedup.Options) dedup.Store) *results {
	return record(t, func(rt deduptest.T) {
		deduptest.ExerciseT(rt, func(_ testing.TB, opts dedup.Options) dedup.Store { return build(opts) })
	})
}

// TestRecorderPassesCorrectStore is the control: through the recorder, the
// memory store passes every check, and every check ran.
func TestRecorderPassesCorrectStore(t *testing.T) {
	t.Parallel()
	res := exercise(t, memory)
	if f := res.failing(); len(f) != 0 {
		for _, name := range f {
			t.Errorf("%s failed for the memory store: %s", name, res.messages(name))
		}
	}
	for _, name := range leaves {
		if !res.didPass(name) {
			t.Errorf("check %s did not run", name)
		}
	}
}

// TestKitCatchesBrokenStores runs the kit against stores that each break one
// rule and asserts that the check for that rule fails (other checks may fail
// as a consequence; claim/new-key, which every one of them gets right, must
// pass, so the kit is not failing indiscriminately).
func TestKitCatchesBrokenStores(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		build func(opts dedup.Options) dedup.Store
		want  []string // checks that must fail
	}{
		{"never-duplicate", func(o dedup.Options) dedup.Store { return neverDuplicate{memory(o)} },
			[]string{"duplicate/binary-reply", "duplicate/empty-reply"}},
		{"text-reply", func(o dedup.Options) dedup.Store { return textReply{memory(o)} },
			[]string{"duplicate/binary-reply", "duplicate/large-reply"}},
		{"request-hash", func(o dedup.Options) dedup.Store { return requestHash{memory(o)} },
			[]string{"duplicate/stored-payload-hash"}},
		{"aliased-reply", func(o dedup.Options) dedup.Store {
			return &aliasedReply{Store: memory(o), replies: map[dedup.Key][]byte{}}
		}, []string{"duplicate/reply-is-a-copy"}},
		{"in-flight-as-duplicate", func(o dedup.Options) dedup.Store { return inFlightAsDuplicate{memory(o)} },
			[]string{"in-flight/within-lease"}},
		{"zero-retry-after", func(o dedup.Options) dedup.Store { return zeroRetryAfter{memory(o)} },
			[]string{"in-flight/within-lease"}},
		{"steals-lease", func(o dedup.Options) dedup.Store { return stealsLease{memory(o)} },
			[]string{"in-flight/within-lease", "concurrency/one-claim"}},
		{"accept-ignores-token", func(o dedup.Options) dedup.Store { return acceptIgnoresToken{memory(o), newTracker()} },
			[]string{"lease/stale-accept", "abandon/wrong-token"}},
		{"abandon-ignores-token", func(o dedup.Options) dedup.Store { return abandonIgnoresToken{memory(o), newTracker()} },
			[]string{"lease/stale-abandon"}},
		{"abandon-keeps-claim", func(o dedup.Options) dedup.Store { return abandonKeepsClaim{memory(o)} },
			[]string{"abandon/reclaim"}},
		{"accept-after-abandon", func(o dedup.Options) dedup.Store { return acceptAfterAbandon{memory(o), newTracker()} },
			[]string{"abandon/accept-after-abandon"}},
		{"accept-twice", func(o dedup.Options) dedup.Store { return acceptTwice{memory(o), newTracker()} },
			[]string{"accept/twice"}},
		{"expire-ignores-before", func(o dedup.Options) dedup.Store { return expireIgnoresBefore{memory(o)} },
			[]string{"expire/keeps-young-accepted"}},
		{"expire-removes-claims", func(o dedup.Options) dedup.Store { return expireRemovesClaims{memory(o), newTracker()} },
			[]string{"expire/keeps-claims", "expire/removes-old-accepted"}},
		{"ignores-window", func(o dedup.Options) dedup.Store { return ignoresWindow{memory(o)} },
			[]string{"window/reuses-old"}},
		{"window-on-claims", func(o dedup.Options) dedup.Store { return windowOnClaims{memory(o)} },
			[]string{"window/in-flight-unaffected"}},
		{"racy-claim", func(o dedup.Options) dedup.Store { return newRacy(o) },
			[]string{"concurrency/one-claim"}},
		{"truncated-key", func(o dedup.Options) dedup.Store { return truncatedKey{memory(o)} },
			[]string{"keys/independent"}},
		{"key-derived-token", func(o dedup.Options) dedup.Store { return keyDerivedToken{memory(o), newTracker()} },
			[]string{"lease/takeover-new-token", "abandon/reclaim"}},
		{"rejects-late-accept", func(o dedup.Options) dedup.Store {
			return rejectsLateAccept{memory(o), newTracker(), o.WithDefaults().Lease}
		}, []string{"lease/late-accept-without-takeover"}},
	}
	// The kit sleeps about 2.4s for leases and windows; run every broken
	// store at once (not with t.Parallel, which -parallel limits to
	// GOMAXPROCS) and assert afterwards.
	all := make([]*results, len(cases))
	took := make([]time.Duration, len(cases))
	var wg sync.WaitGroup
	for i, tc := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			all[i] = exercise(t, tc.build)
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
			if !res.didPass("claim/new-key") {
				t.Errorf("claim/new-key failed too: %s", res.messages("claim/new-key"))
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

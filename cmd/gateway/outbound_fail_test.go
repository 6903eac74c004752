package main

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/internal/submitapi"
)

// TestSendingPartnerFailureModes: the real gateway binary sends AS2 to five
// partners the test plays, each on the schedule 1s, 2s, 4s, 4s… (give up
// after 20s), the attempt bounded by 2s:
//   - down: the port closed for two attempts, then the real receiver comes
//     up: delivered;
//   - 500: three 500 answers, then the real receiver: delivered on the 4th;
//   - hang: the first request never answered (past send.timeout), then the
//     real receiver: delivered on the 2nd;
//   - negative: the real receiver refuses the message for good (its
//     agreement allows only SHA-512 signatures) with a negative MDN:
//     failed at once with its reason, and never sent again;
//   - never: 503 on every request: failed once the give-up age leaves no
//     room for another attempt, with the last error.
//
// For each: the state and reason through the submission API, one audit
// record (step send) per attempt, and attempts no closer than the policy.
func TestSendingPartnerFailureModes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the gateway binary for about 25s")
	}
	rDown, r500, rHang := newObReceiver(t, "B1", false), newObReceiver(t, "B2", false), newObReceiver(t, "B3", false)
	rNeg := newObReceiver(t, "B4", true)
	down := newObFront(t, rDown.URL, func(int) string { return "pass" })
	f500 := newObFront(t, r500.URL, func(n int) string { return map[bool]string{true: "500", false: "pass"}[n <= 3] })
	hang := newObFront(t, rHang.URL, func(n int) string { return map[bool]string{true: "hang", false: "pass"}[n == 1] })
	neg := newObFront(t, rNeg.URL, func(int) string { return "pass" })
	never := newObFront(t, "", func(int) string { return "503" })
	for _, f := range []*obFront{f500, hang, neg, never} {
		f.open(t)
	}
	gw := startObSender(t, map[string]string{
		"down.yaml":     partnerYAML("down", "B1", down.URL(), "2s", "20s"),
		"five.yaml":     partnerYAML("five", "B2", f500.URL(), "2s", "20s"),
		"hang.yaml":     partnerYAML("hang", "B3", hang.URL(), "2s", "20s"),
		"negative.yaml": partnerYAML("negative", "B4", neg.URL(), "2s", "20s"),
		"never.yaml":    partnerYAML("never", "B5", never.URL(), "2s", "20s"),
	})
	ids := map[string]submitapi.Status{}
	for _, p := range []string{"down", "five", "hang", "negative", "never"} {
		ids[p] = gw.submit(t, p, "", opaque(2048))
	}
	var wg sync.WaitGroup
	run := func(name string, f func(t *testing.T)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(name, f)
		}()
	}
	final := func(st submitapi.Status) bool { return st.Final }

	run("down", func(t *testing.T) {
		id := ids["down"].ID
		st := gw.waitStatus(t, id, 15*time.Second, "tried twice", func(st submitapi.Status) bool { return st.Attempts >= 2 })
		if (st.State != "queued" && st.State != "sending") || !containsAny(st.LastError, "refused", "connect") {
			t.Errorf("partner down: state %s, last_error %q", st.State, st.LastError)
		}
		down.open(t)
		st = gw.waitStatus(t, id, 20*time.Second, "final", final)
		if st.State != "delivered" || rDown.delivered() != 1 || len(down.requests()) != 1 {
			t.Fatalf("state %s (reason %q), receiver got %d, front saw %d requests", st.State, st.Reason, rDown.delivered(), len(down.requests()))
		}
		checkAttempts(t, gw, ids["down"], st, "retry", "delivered")
	})
	run("500", func(t *testing.T) {
		st := gw.waitStatus(t, ids["five"].ID, 30*time.Second, "final", final)
		if st.State != "delivered" || st.Attempts != 4 || r500.delivered() != 1 || len(f500.requests()) != 4 {
			t.Fatalf("state %s (reason %q), %d attempts, receiver got %d, front saw %d requests", st.State, st.Reason, st.Attempts, r500.delivered(), len(f500.requests()))
		}
		checkAttempts(t, gw, ids["five"], st, "retry", "delivered")
		checkSchedule(t, "500 (front)", f500.requests(), 150*time.Millisecond)
		for _, r := range gw.sends(t, ids["five"].MessageID)[:3] {
			if r.Disposition != "500" || !containsAny(r.Error, "500") {
				t.Errorf("audit of a 500 answer: disposition %q, error %q", r.Disposition, r.Error)
			}
		}
	})
	run("hang", func(t *testing.T) {
		st := gw.waitStatus(t, ids["hang"].ID, 30*time.Second, "final", final)
		if st.State != "delivered" || st.Attempts != 2 || rHang.delivered() != 1 {
			t.Fatalf("state %s (reason %q), %d attempts, receiver got %d", st.State, st.Reason, st.Attempts, rHang.delivered())
		}
		rs := checkAttempts(t, gw, ids["hang"], st, "retry", "delivered")
		if !containsAny(rs[0].Error, "timeout", "deadline") {
			t.Errorf("the hung attempt's audit error %q does not say it timed out", rs[0].Error)
		}
		reqs := hang.requests()
		if d := rs[0].Time.Sub(reqs[0]); d < 2*time.Second-150*time.Millisecond {
			t.Errorf("the hung attempt was given up %s after the request; send.timeout is 2s", d)
		}
		checkSchedule(t, "hang (front)", reqs, 150*time.Millisecond)
	})
	run("negative", func(t *testing.T) {
		st := gw.waitStatus(t, ids["negative"].ID, 15*time.Second, "final", final)
		if st.State != "failed" || st.Attempts != 1 || !containsAny(st.Reason, "error") || st.Evidence == nil || st.Evidence.Kind != "mdn" {
			t.Fatalf("negative MDN: state %s, attempts %d, reason %q, evidence %+v", st.State, st.Attempts, st.Reason, st.Evidence)
		}
		t.Logf("failed with the partner's reason %q (disposition %q)", st.Reason, st.Evidence.Disposition)
		// Never sent again: longer than the first retry delay plus the
		// sender's poll.
		time.Sleep(7 * time.Second)
		if n := len(neg.requests()); n != 1 {
			t.Errorf("the partner saw %d requests after a negative MDN", n)
		}
		checkAttempts(t, gw, ids["negative"], gw.status(t, ids["negative"].ID), "", "refused")
	})
	run("never", func(t *testing.T) {
		st := gw.waitStatus(t, ids["never"].ID, 40*time.Second, "final", final)
		if st.State != "failed" || !containsAny(st.Reason, "503") || st.Evidence != nil {
			t.Fatalf("state %s, reason %q, evidence %+v", st.State, st.Reason, st.Evidence)
		}
		checkAttempts(t, gw, ids["never"], st, "retry", "gave-up")
		reqs := never.requests()
		checkSchedule(t, "never (front)", reqs, 150*time.Millisecond)
		// Given up when the next attempt (at most 4s later) would have
		// come after the give-up age, not before.
		last := reqs[len(reqs)-1]
		if age := st.Updated.Sub(st.Created); age < 20*time.Second-4*time.Second-150*time.Millisecond {
			t.Errorf("gave up %s after the submission; give_up_after 20s, retry max 4s", age)
		}
		if last.Sub(st.Created) > 20*time.Second+time.Second { // leased before the age, posted a moment later
			t.Errorf("an attempt %s after the submission; give_up_after 20s", last.Sub(st.Created))
		}
		t.Logf("gave up after %d attempts, %s after the submission: %q", st.Attempts, st.Updated.Sub(st.Created).Round(time.Millisecond), st.Reason)
	})
	wg.Wait()
}

// checkAttempts asserts the message's audit trail (step send): one record
// per attempt, every one but the last with decision mid (when not empty),
// the last with decision last (or, for a give-up, one more record without
// an attempt), the attempts at least the policy's delays apart; it returns
// the attempts' records.
func checkAttempts(t *testing.T, gw *obSender, sub submitapi.Status, st submitapi.Status, mid, last string) []audit.Record {
	t.Helper()
	// The Sender audits an outcome after the store recorded it: the
	// status may be final a moment before the audit has its record.
	rs := gw.sends(t, sub.MessageID)
	for deadline := time.Now().Add(5 * time.Second); (len(rs) == 0 || rs[len(rs)-1].Decision != last) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		rs = gw.sends(t, sub.MessageID)
	}
	ds := sendDecisions(rs)
	want := []string{}
	for i := 1; i < st.Attempts; i++ {
		want = append(want, mid)
	}
	want = append(want, last)
	// A give-up found when the message is next due (the age passed while
	// it waited) is audited without an attempt of its own.
	if last == "gave-up" && len(rs) == st.Attempts+1 {
		want = append(want[:len(want)-1], mid, last)
		rs = rs[:len(rs)-1]
		defer func() { t.Logf("%s: given up when next due, after the age passed (no attempt)", sub.Partner) }()
	}
	if !slices.Equal(ds, want) {
		t.Fatalf("audit decisions %v for %d attempts, want %v", ds, st.Attempts, want)
	}
	// The audit's times are when attempts ended (recorded after the store
	// wrote the outcome, a little after the retry's due time was fixed):
	// a looser bound than the partner's view of when they began.
	checkSchedule(t, fmt.Sprintf("%s (audit)", sub.Partner), auditTimes(rs), 500*time.Millisecond)
	return rs
}

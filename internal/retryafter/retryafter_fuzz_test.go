package retryafter

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzRetryAfter feeds arbitrary Retry-After values (a partner's HTTP
// answer) to Parse: the wait is never negative, a number of seconds
// is waited for (at least as long as any smaller number), and an HTTP date
// is waited for until it comes.
func FuzzRetryAfter(f *testing.F) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	for _, s := range []string{"", "0", "30", " 60 ", "-5", "120s", "1e3",
		"Sat, 05 Dec 2026 12:01:00 GMT", "Sat, 05 Dec 2026 11:59:00 GMT", "Sunday, 06-Dec-26 12:00:00 GMT",
		"Sun Dec  6 12:00:00 2026", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d := Parse(v, now)
		if d < 0 {
			t.Fatalf("Retry-After %q: negative wait %v", v, d)
		}
		if s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && s > 0 {
			if d <= 0 {
				t.Fatalf("Retry-After %q: no wait", v)
			}
			if s <= int64(time.Duration(1<<63-1)/time.Second) && d != time.Duration(s)*time.Second {
				t.Fatalf("Retry-After %q: wait %v", v, d)
			}
			if s > 1 && Parse(strconv.FormatInt(s-1, 10), now) > d {
				t.Fatalf("Retry-After %q: shorter wait than for one second less", v)
			}
		}
	})
}

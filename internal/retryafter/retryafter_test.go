package retryafter

import (
	"math"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"30", 30 * time.Second},
		{" 60 ", time.Minute},
		{"-5", 0},
		{"120s", 0},
		{"Sat, 05 Dec 2026 12:01:00 GMT", time.Minute},
		{"Sat, 05 Dec 2026 11:59:00 GMT", 0},
		// More seconds than a Duration holds: the longest wait, not a
		// product wrapped round (9227000000 s gave a negative wait).
		{"9227000000", math.MaxInt64},
		{"99999999999999999999", math.MaxInt64},
		{"-99999999999999999999", 0},
	} {
		if got := Parse(c.v, now); got != c.want {
			t.Errorf("Parse(%q) = %v, want %v", c.v, got, c.want)
		}
	}
}

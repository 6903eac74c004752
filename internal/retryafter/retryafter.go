// Package retryafter reads an HTTP Retry-After value (RFC 9110 §10.2.3) a
// partner answered with: a number of seconds or an HTTP date. One parser
// for the outbound queue's sender and the send commands, so that a value
// of more seconds than a time.Duration holds waits the longest everywhere
// instead of wrapping round to a negative or short wait.
package retryafter

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Parse returns how long v asks to wait at now: its seconds, or the time
// until its HTTP date; 0 for an empty, negative, past or unreadable value.
// More seconds than a Duration holds (some 292 years) is the longest
// Duration.
func Parse(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil || isRange(err) {
		switch {
		case s <= 0:
			return 0
		case s > int64(math.MaxInt64/time.Second):
			return math.MaxInt64
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// isRange reports whether err is strconv's out-of-range error (the value
// is all digits, beyond int64: the result is then ±MaxInt64).
func isRange(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestReasonIsBounded(t *testing.T) {
	for in, want := range map[string]string{
		"processed/error: authentication-failed":   "authentication-failed",
		"processed/error: unknown-trading-partner": "unknown-trading-partner",
		"processed/error: Decryption-Failed":       "decryption-failed",
		"EBMS:0010":                                "EBMS:0010",
		"ebms:0101":                                "EBMS:0101",
		"EBMS:01010":                               OtherReason,
		"damaged-envelope":                         "damaged-envelope",
		"processed/error: <script>" + strings.Repeat("x", 500): OtherReason,
		"":         OtherReason,
		"http-500": OtherReason,
	} {
		if got := Reason(in); got != want {
			t.Errorf("Reason(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPartnerLabelsComeFromTheDirectory(t *testing.T) {
	m := New("test")
	m.SetPartners([]string{"acme"})
	m.Message("as2", "acme", Processed, "")
	m.Message("as2", "evil-from-request", Processed, "")
	m.Message("as2", "", Rejected, "processed/error: unknown-trading-partner")
	m.Message("ftp", "acme", Processed, "")
	if got := testutil.ToFloat64(m.messages.WithLabelValues("as2", "acme", Processed, "")); got != 1 {
		t.Errorf("acme: %v", got)
	}
	if got := testutil.ToFloat64(m.messages.WithLabelValues("as2", Unknown, Processed, "")); got != 1 {
		t.Errorf("unknown partner: %v", got)
	}
	if got := testutil.ToFloat64(m.messages.WithLabelValues("other", "acme", Processed, "")); got != 1 {
		t.Errorf("unknown protocol: %v", got)
	}
	if n := testutil.CollectAndCount(m.messages); n != 4 {
		t.Errorf("%d series, want 4", n)
	}
	m.SetPartners(nil) // a reload removed acme
	m.Message("as2", "acme", Duplicate, "")
	if got := testutil.ToFloat64(m.messages.WithLabelValues("as2", Unknown, Duplicate, "")); got != 1 {
		t.Errorf("removed partner: %v", got)
	}
	m.ConfigReload(false)
	if got := testutil.ToFloat64(m.configReloads.WithLabelValues("failure")); got != 1 {
		t.Errorf("reload failure: %v", got)
	}
}

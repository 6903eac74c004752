package wssec

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

// TestReasonKeepsForeignErrorsInside: an error caused by another package's
// error keeps its sentinel and its full text for the log, and Reason, what
// the partner is told, drops the foreign text.
func TestReasonKeepsForeignErrorsInside(t *testing.T) {
	_, cause := base64.StdEncoding.DecodeString("!!")
	err := authErrCause(cause, "ds:SignatureValue is not base64")
	if !errors.Is(err, ErrFailedAuthentication) || Code(err) != CodeFailedAuthentication || !errors.Is(err, cause) {
		t.Fatalf("sentinel or cause lost: %v", err)
	}
	if !strings.Contains(err.Error(), "illegal base64") {
		t.Errorf("Error %q lacks the cause", err)
	}
	if got, want := Reason(err), "wssec: failed authentication: ds:SignatureValue is not base64"; got != want {
		t.Errorf("Reason = %q, want %q", got, want)
	}
	if got := Reason(policyErr("no wsu:Timestamp")); got != "wssec: policy noncompliance: no wsu:Timestamp" {
		t.Errorf("Reason of our own error = %q", got)
	}
}

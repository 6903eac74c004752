package wssec

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by Verify, the Signature methods and
// ParseEnvelope wraps exactly one of them; use errors.Is or Code.
var (
	// ErrFailedAuthentication (EBMS:0101): unknown signer, bad signature
	// value, a digest that does not match, a reference that cannot be
	// resolved, or a timestamp outside the clock skew.
	ErrFailedAuthentication = errors.New("wssec: failed authentication")
	// ErrPolicyNoncompliance (EBMS:0103): missing signature or security
	// header, required element or attachment not covered, too many
	// references, disallowed or unsupported algorithm, duplicate ids.
	ErrPolicyNoncompliance = errors.New("wssec: policy noncompliance")
	// ErrInvalidXML (EBMS:0009 InvalidHeader): the envelope is not a
	// well-formed, DTD-free SOAP envelope within the configured limits.
	ErrInvalidXML = errors.New("wssec: invalid envelope")
	// ErrUnknownSigner is wrapped, besides ErrFailedAuthentication, by the
	// error of a ds:KeyInfo that names a signer (by token, subject key
	// identifier, issuer and serial or thumbprint) that is none of the
	// certificates Verify may accept: the trusted ones and, with
	// CheckSigner, those of the header's tokens.
	ErrUnknownSigner = errors.New("wssec: unknown signer")
)

// EBMS error codes the sentinel errors map to.
const (
	CodeFailedAuthentication = "EBMS:0101"
	CodePolicyNoncompliance  = "EBMS:0103"
	CodeInvalidHeader        = "EBMS:0009"
)

// Code returns the ebMS3 error code for an error of this package
// ("EBMS:0101", "EBMS:0103" or "EBMS:0009"), or "" if err is nil or not one
// of ours.
func Code(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrFailedAuthentication):
		return CodeFailedAuthentication
	case errors.Is(err, ErrPolicyNoncompliance):
		return CodePolicyNoncompliance
	case errors.Is(err, ErrInvalidXML):
		return CodeInvalidHeader
	}
	return ""
}

func authErr(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrFailedAuthentication}, a...)...)
}

// unknownSignerErr is authErr that also wraps ErrUnknownSigner (the text
// is authErr's).
func unknownSignerErr(format string, a ...any) error {
	return &unknownSignerError{authErr(format, a...)}
}

type unknownSignerError struct{ err error }

func (e *unknownSignerError) Error() string   { return e.err.Error() }
func (e *unknownSignerError) Unwrap() []error { return []error{e.err, ErrUnknownSigner} }

func policyErr(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrPolicyNoncompliance}, a...)...)
}

func xmlErr(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidXML}, a...)...)
}

// causeError is one of our errors caused by a foreign one (a base64, XML,
// X.509 or crypto package error): Error gives both for the log, Reason only
// ours, so that partners are not shown another package's error text.
type causeError struct {
	ours, cause error
}

func (e *causeError) Error() string   { return e.ours.Error() + ": " + e.cause.Error() }
func (e *causeError) Unwrap() []error { return []error{e.ours, e.cause} }

func authErrCause(cause error, format string, a ...any) error {
	return &causeError{authErr(format, a...), cause}
}

func xmlErrCause(cause error, format string, a ...any) error {
	return &causeError{xmlErr(format, a...), cause}
}

// Reason is the text of an error of this package for the sending partner:
// Error without the text of a foreign error that caused it (which stays in
// Error, for the log).
func Reason(err error) string {
	var te *TrustError
	if errors.As(err, &te) {
		return te.Reason
	}
	var ce *causeError
	if errors.As(err, &ce) {
		return ce.ours.Error()
	}
	return err.Error()
}

package xmlenc

import (
	"errors"
	"fmt"
)

// ebMS3 error codes carried by *Error.
const (
	// CodeFailedDecryption is EBMS:0102 FailedDecryption.
	CodeFailedDecryption = "EBMS:0102"
	// CodePolicyNoncompliance is EBMS:0103 PolicyNoncompliance.
	CodePolicyNoncompliance = "EBMS:0103"
)

// Sentinel causes; test them with errors.Is. Every error returned by Decrypt
// is an *Error wrapping one of them.
var (
	// ErrNoKey: no xenc:EncryptedKey is addressed to one of the configured keys
	// (EBMS:0102).
	ErrNoKey = errors.New("xmlenc: no EncryptedKey addressed to a configured key")
	// ErrDecrypt: a cryptographic operation failed (key unwrap, GCM tag, CBC
	// padding) (EBMS:0102).
	ErrDecrypt = errors.New("xmlenc: decryption failed")
	// ErrMalformed: the encryption structures are missing, inconsistent or
	// ambiguous (EBMS:0102).
	ErrMalformed = errors.New("xmlenc: malformed encryption structure")
	// ErrLimit: a configured size or count limit was exceeded (EBMS:0102).
	ErrLimit = errors.New("xmlenc: limit exceeded")
	// ErrUnsupported: an algorithm or construct is not implemented (EBMS:0103).
	ErrUnsupported = errors.New("xmlenc: unsupported algorithm")
	// ErrPolicy: the message does not meet Options (algorithm allow-list,
	// required encryption) (EBMS:0103).
	ErrPolicy = errors.New("xmlenc: security policy not met")
)

// Error is the typed error of this package: an ebMS error code plus the cause.
type Error struct {
	Code string // CodeFailedDecryption or CodePolicyNoncompliance
	Err  error  // wraps one of the sentinel errors
}

func (e *Error) Error() string { return e.Code + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Code returns the ebMS error code carried by err, or "" if err is not (or
// does not wrap) an *Error.
func Code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// fail builds an *Error whose code follows from the sentinel.
func fail(sentinel error, format string, args ...any) *Error {
	code := CodeFailedDecryption
	if sentinel == ErrUnsupported || sentinel == ErrPolicy {
		code = CodePolicyNoncompliance
	}
	msg := fmt.Sprintf(format, args...)
	return &Error{Code: code, Err: fmt.Errorf("%w: %s", sentinel, msg)}
}

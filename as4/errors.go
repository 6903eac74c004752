package as4

import (
	"errors"
	"fmt"
)

// Severity values of an ebMS error (eb:Error/@severity).
const (
	SeverityFailure = "failure"
	SeverityWarning = "warning"
)

// Category values of an ebMS error (eb:Error/@category).
const (
	CategoryContent       = "Content"
	CategoryCommunication = "Communication"
	CategoryUnpackaging   = "Unpackaging"
	CategoryProcessing    = "Processing"
)

// Error codes of ebMS 3.0 Core §6.7 and of the AS4 profile §5.1.
const (
	CodeValueNotRecognized               = "EBMS:0001"
	CodeFeatureNotSupported              = "EBMS:0002"
	CodeValueInconsistent                = "EBMS:0003"
	CodeOther                            = "EBMS:0004"
	CodeConnectionFailure                = "EBMS:0005"
	CodeEmptyMessagePartitionChannel     = "EBMS:0006"
	CodeMimeInconsistency                = "EBMS:0007"
	CodeFeatureNotSupportedInconsistency = "EBMS:0008"
	CodeInvalidHeader                    = "EBMS:0009"
	CodeProcessingModeMismatch           = "EBMS:0010"
	CodeExternalPayloadError             = "EBMS:0011"
	CodeFailedAuthentication             = "EBMS:0101"
	CodeFailedDecryption                 = "EBMS:0102"
	CodePolicyNoncompliance              = "EBMS:0103"
	CodeDysfunctionalReliability         = "EBMS:0201"
	CodeDeliveryFailure                  = "EBMS:0202"
	CodeMissingReceipt                   = "EBMS:0301"
	CodeInvalidReceipt                   = "EBMS:0302"
	CodeDecompressionFailure             = "EBMS:0303"
)

// errorKind is one row of the error tables of ebMS 3.0 Core §6.7 (0001-0011
// processing, 0101-0103 security, 0201-0202 reliability) and of the AS4
// profile (0301-0303 additional features).
type errorKind struct {
	short, severity, category, description string
}

// errorKinds holds the short description, severity, category and a
// description (worded after the specification's) of every standard code.
// ebMS 3.0 Core names both 0002 and 0008 "FeatureNotSupported"; the table
// keeps the specification's spelling.
var errorKinds = map[string]errorKind{
	CodeValueNotRecognized: {"ValueNotRecognized", SeverityFailure, CategoryContent,
		"The message is well formed and schema valid, but an element or attribute holds a value the MSH does not recognise and cannot use."},
	CodeFeatureNotSupported: {"FeatureNotSupported", SeverityWarning, CategoryContent,
		"The message is well formed and schema valid, but an element or attribute value asks for a feature the MSH does not support."},
	CodeValueInconsistent: {"ValueInconsistent", SeverityFailure, CategoryContent,
		"The message is well formed and schema valid, but an element or attribute value is inconsistent with other values, with the processing mode, or with the rules of ebMS 3.0."},
	CodeOther: {"Other", SeverityFailure, CategoryContent,
		"Another error occurred."},
	CodeConnectionFailure: {"ConnectionFailure", SeverityFailure, CategoryCommunication,
		"The MSH cannot open a transport connection with the remote MSH, temporarily or permanently."},
	CodeEmptyMessagePartitionChannel: {"EmptyMessagePartitionChannel", SeverityWarning, CategoryCommunication,
		"No message is available for pulling from this MPC at this moment."},
	CodeMimeInconsistency: {"MimeInconsistency", SeverityFailure, CategoryUnpackaging,
		"The use of MIME does not follow the required usage."},
	CodeFeatureNotSupportedInconsistency: {"FeatureNotSupported", SeverityFailure, CategoryUnpackaging,
		"The message is well formed and schema valid, but the presence or absence of an element or attribute does not fit the features the MSH supports."},
	CodeInvalidHeader: {"InvalidHeader", SeverityFailure, CategoryUnpackaging,
		"The ebMS header is not well-formed XML or does not follow the ebMS packaging rules."},
	CodeProcessingModeMismatch: {"ProcessingModeMismatch", SeverityFailure, CategoryProcessing,
		"The ebMS header or another expected header does not fit the processing mode (P-Mode) agreed for this message."},
	CodeExternalPayloadError: {"ExternalPayloadError", SeverityFailure, CategoryContent,
		"The MSH cannot resolve a payload reference (eb:PartInfo/@href) to a part of the message."},
	CodeFailedAuthentication: {"FailedAuthentication", SeverityFailure, CategoryProcessing,
		"The signature in the WS-Security header could not be validated."},
	CodeFailedDecryption: {"FailedDecryption", SeverityFailure, CategoryProcessing,
		"Encrypted data referenced by the WS-Security header could not be decrypted."},
	CodePolicyNoncompliance: {"PolicyNoncompliance", SeverityFailure, CategoryProcessing,
		"The security methods, parameters or scope of the message do not satisfy the agreed security policy."},
	CodeDysfunctionalReliability: {"DysfunctionalReliability", SeverityFailure, CategoryProcessing,
		"A reliability function is not operational, or the reliability state of this message sequence is not valid."},
	CodeDeliveryFailure: {"DeliveryFailure", SeverityFailure, CategoryCommunication,
		"The message could not be delivered."},
	CodeMissingReceipt: {"MissingReceipt", SeverityFailure, CategoryCommunication,
		"No receipt was received for a message sent earlier by the MSH reporting this error."},
	CodeInvalidReceipt: {"InvalidReceipt", SeverityFailure, CategoryCommunication,
		"A receipt was received for a message sent earlier, but its content does not match the message (a part is not acknowledged or a digest differs)."},
	CodeDecompressionFailure: {"DecompressionFailure", SeverityFailure, CategoryCommunication,
		"A payload could not be decompressed."},
}

// Error is an ebMS error: what eb:SignalMessage/eb:Error carries, and the
// error value every function of this package returns for partner input
// problems. Err is the internal cause and is never sent to the partner;
// Detail is a partner-safe explanation (rendered as eb:ErrorDetail).
type Error struct {
	// Code is the ebMS error code, for example "EBMS:0004".
	Code string
	// ShortDescription is the code's short name, for example "Other".
	ShortDescription string
	// Severity is SeverityFailure or SeverityWarning.
	Severity string
	// Category is one of the Category* values.
	Category string
	// Description is a readable description of the error (eb:Description).
	Description string
	// Detail is a partner-safe explanation of this occurrence (eb:ErrorDetail).
	Detail string
	// RefToMessageID is the eb:MessageId of the message in error, when known.
	RefToMessageID string
	// Origin is the optional eb:Error/@origin ("ebMS", "security", ...).
	Origin string
	// Err is the underlying cause, if any.
	Err error
}

// NewError returns an error with the standard short description, severity,
// category and description of code. A code outside the standard tables gets
// severity failure and category Processing, with empty descriptions.
func NewError(code, detail string, cause error) *Error {
	e := &Error{Code: code, Detail: detail, Err: cause, Severity: SeverityFailure, Category: CategoryProcessing}
	if k, ok := errorKinds[code]; ok {
		e.ShortDescription, e.Severity, e.Category, e.Description = k.short, k.severity, k.category, k.description
	}
	return e
}

// Error implements error.
func (e *Error) Error() string {
	s := e.Code
	if e.ShortDescription != "" {
		s += " " + e.ShortDescription
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return "as4: " + s
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// WithRef sets RefToMessageID and returns e.
func (e *Error) WithRef(messageID string) *Error {
	e.RefToMessageID = messageID
	return e
}

// CodeOf returns the ebMS error code carried by err (through wrapping), or ""
// when err holds no *Error.
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// AsError returns the *Error inside err, or a new EBMS:0004 Other error
// wrapping err when it holds none. It returns nil for a nil err.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return NewError(CodeOther, "", err)
}

// ValueNotRecognized returns an EBMS:0001 error.
func ValueNotRecognized(detail string, cause error) *Error {
	return NewError(CodeValueNotRecognized, detail, cause)
}

// FeatureNotSupported returns an EBMS:0002 error (severity warning).
func FeatureNotSupported(detail string, cause error) *Error {
	return NewError(CodeFeatureNotSupported, detail, cause)
}

// ValueInconsistent returns an EBMS:0003 error.
func ValueInconsistent(detail string, cause error) *Error {
	return NewError(CodeValueInconsistent, detail, cause)
}

// Other returns an EBMS:0004 error.
func Other(detail string, cause error) *Error { return NewError(CodeOther, detail, cause) }

// ConnectionFailure returns an EBMS:0005 error.
func ConnectionFailure(detail string, cause error) *Error {
	return NewError(CodeConnectionFailure, detail, cause)
}

// EmptyMessagePartitionChannel returns an EBMS:0006 error (severity warning).
func EmptyMessagePartitionChannel(detail string, cause error) *Error {
	return NewError(CodeEmptyMessagePartitionChannel, detail, cause)
}

// MimeInconsistency returns an EBMS:0007 error.
func MimeInconsistency(detail string, cause error) *Error {
	return NewError(CodeMimeInconsistency, detail, cause)
}

// FeatureNotSupportedInconsistency returns an EBMS:0008 error.
func FeatureNotSupportedInconsistency(detail string, cause error) *Error {
	return NewError(CodeFeatureNotSupportedInconsistency, detail, cause)
}

// InvalidHeader returns an EBMS:0009 error.
func InvalidHeader(detail string, cause error) *Error {
	return NewError(CodeInvalidHeader, detail, cause)
}

// ProcessingModeMismatch returns an EBMS:0010 error.
func ProcessingModeMismatch(detail string, cause error) *Error {
	return NewError(CodeProcessingModeMismatch, detail, cause)
}

// ExternalPayloadError returns an EBMS:0011 error.
func ExternalPayloadError(detail string, cause error) *Error {
	return NewError(CodeExternalPayloadError, detail, cause)
}

// FailedAuthentication returns an EBMS:0101 error.
func FailedAuthentication(detail string, cause error) *Error {
	return NewError(CodeFailedAuthentication, detail, cause)
}

// FailedDecryption returns an EBMS:0102 error.
func FailedDecryption(detail string, cause error) *Error {
	return NewError(CodeFailedDecryption, detail, cause)
}

// PolicyNoncompliance returns an EBMS:0103 error.
func PolicyNoncompliance(detail string, cause error) *Error {
	return NewError(CodePolicyNoncompliance, detail, cause)
}

// DysfunctionalReliability returns an EBMS:0201 error.
func DysfunctionalReliability(detail string, cause error) *Error {
	return NewError(CodeDysfunctionalReliability, detail, cause)
}

// DeliveryFailure returns an EBMS:0202 error.
func DeliveryFailure(detail string, cause error) *Error {
	return NewError(CodeDeliveryFailure, detail, cause)
}

// MissingReceipt returns an EBMS:0301 error.
func MissingReceipt(detail string, cause error) *Error {
	return NewError(CodeMissingReceipt, detail, cause)
}

// InvalidReceipt returns an EBMS:0302 error.
func InvalidReceipt(detail string, cause error) *Error {
	return NewError(CodeInvalidReceipt, detail, cause)
}

// DecompressionFailure returns an EBMS:0303 error.
func DecompressionFailure(detail string, cause error) *Error {
	return NewError(CodeDecompressionFailure, detail, cause)
}

func invalidHeaderf(format string, args ...any) *Error {
	return InvalidHeader(fmt.Sprintf(format, args...), nil)
}

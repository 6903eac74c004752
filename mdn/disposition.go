// Package mdn builds, signs, parses and verifies AS2 Message Disposition
// Notifications (RFC 4130 §7, RFC 3798): a multipart/report with a human
// readable text/plain part and a message/disposition-notification part,
// optionally wrapped in multipart/signed.
//
// The package does no cryptography itself: signing and verification are
// functions the caller injects, so it depends on no CMS implementation.
package mdn

import (
	"errors"
	"fmt"
	"strings"
)

// Disposition modes (RFC 3798 §3.2.6.1).
const (
	ActionAutomatic  = "automatic-action"
	ActionManual     = "manual-action"
	SendingAutomatic = "MDN-sent-automatically"
	SendingManual    = "MDN-sent-manually"
)

// Disposition types used by AS2 (RFC 4130 §7.5.3).
const (
	TypeProcessed = "processed"
	TypeFailed    = "failed"
)

// Disposition modifiers (RFC 4130 §7.5.3).
const (
	ModifierError   = "error"
	ModifierWarning = "warning"
	ModifierFailure = "failure"
)

// Disposition modifier descriptions. The error descriptions are the
// AS2-disposition-modifier-extension values of RFC 4130 §7.5.3; the others
// are in common use by AS2 products.
const (
	DescAuthenticationFailed        = "authentication-failed"
	DescDecompressionFailed         = "decompression-failed"
	DescDecryptionFailed            = "decryption-failed"
	DescInsufficientMessageSecurity = "insufficient-message-security"
	DescIntegrityCheckFailed        = "integrity-check-failed"
	DescUnexpectedProcessingError   = "unexpected-processing-error"
	// DescUnknownTradingPartner is sent when AS2-From/AS2-To name no
	// configured partnership; it is the spelling of mendelson, OpenAS2 and
	// pyas2lib.
	DescUnknownTradingPartner = "unknown-trading-partner"
	// DescUnknownTradingRelationship is another product's spelling of
	// DescUnknownTradingPartner. ParseDisposition maps it to
	// DescUnknownTradingPartner; the gateway never sends it.
	DescUnknownTradingRelationship = "unknown-trading-relationship"
	// DescDuplicateDocument is the warning for a retransmitted message.
	DescDuplicateDocument = "duplicate-document"
	// Failure descriptions (failed/failure:) about the MDN request itself.
	DescUnsupportedFormat        = "unsupported format"
	DescUnsupportedMICAlgorithms = "unsupported MIC-algorithms"
	DescSenderEqualsReceiver     = "sender-equals-receiver"
)

// Disposition is the value of an MDN's Disposition field:
// action-mode/sending-mode; type[/modifier[: description]].
type Disposition struct {
	ActionMode  string // "automatic-action" or "manual-action"
	SendingMode string // "MDN-sent-automatically" or "MDN-sent-manually"
	Type        string // "processed" or "failed"
	Modifier    string // "error", "warning", "failure" or ""
	Description string // e.g. "decryption-failed", "duplicate-document"
}

// Ready-made dispositions the gateway sends.
var (
	DispProcessed                   = Disposition{ActionAutomatic, SendingAutomatic, TypeProcessed, "", ""}
	DispDecryptionFailed            = ProcessedError(DescDecryptionFailed)
	DispAuthenticationFailed        = ProcessedError(DescAuthenticationFailed)
	DispIntegrityCheckFailed        = ProcessedError(DescIntegrityCheckFailed)
	DispDecompressionFailed         = ProcessedError(DescDecompressionFailed)
	DispInsufficientMessageSecurity = ProcessedError(DescInsufficientMessageSecurity)
	DispUnexpectedProcessingError   = ProcessedError(DescUnexpectedProcessingError)
	DispUnknownTradingPartner       = ProcessedError(DescUnknownTradingPartner)
	DispDuplicateDocument           = ProcessedWarning(DescDuplicateDocument)
	DispUnsupportedFormat           = Failed(DescUnsupportedFormat)
	DispUnsupportedMICAlgorithms    = Failed(DescUnsupportedMICAlgorithms)
	DispSenderEqualsReceiver        = Failed(DescSenderEqualsReceiver)
)

// ProcessedError returns automatic-action/MDN-sent-automatically;
// processed/error: desc.
func ProcessedError(desc string) Disposition {
	return Disposition{ActionAutomatic, SendingAutomatic, TypeProcessed, ModifierError, desc}
}

// ProcessedWarning returns automatic-action/MDN-sent-automatically;
// processed/warning: desc.
func ProcessedWarning(desc string) Disposition {
	return Disposition{ActionAutomatic, SendingAutomatic, TypeProcessed, ModifierWarning, desc}
}

// Failed returns automatic-action/MDN-sent-automatically; failed/failure:
// desc (RFC 4130 §7.4.4: the MDN request itself could not be honoured).
func Failed(desc string) Disposition {
	return Disposition{ActionAutomatic, SendingAutomatic, TypeFailed, ModifierFailure, desc}
}

// String formats the Disposition field value, e.g.
// "automatic-action/MDN-sent-automatically; processed/error: decryption-failed".
// Empty modes default to automatic-action/MDN-sent-automatically and an
// empty type to processed.
func (d Disposition) String() string {
	var sb strings.Builder
	sb.WriteString(orDefault(d.ActionMode, ActionAutomatic))
	sb.WriteByte('/')
	sb.WriteString(orDefault(d.SendingMode, SendingAutomatic))
	sb.WriteString("; ")
	sb.WriteString(orDefault(d.Type, TypeProcessed))
	if d.Modifier != "" {
		sb.WriteByte('/')
		sb.WriteString(d.Modifier)
	}
	if d.Description != "" {
		sb.WriteString(": ")
		sb.WriteString(d.Description)
	}
	return sanitize(sb.String())
}

// IsProcessed reports whether the partner processed the message: type
// processed without an error modifier (a warning still counts).
func (d Disposition) IsProcessed() bool {
	return d.Type == TypeProcessed && (d.Modifier == "" || d.Modifier == ModifierWarning)
}

// IsWarning reports a processed/warning disposition.
func (d Disposition) IsWarning() bool {
	return d.Type == TypeProcessed && d.Modifier == ModifierWarning
}

// IsError reports a negative disposition: any type other than processed, or
// an error or failure modifier.
func (d Disposition) IsError() bool {
	return !d.IsProcessed()
}

// ErrInvalidDisposition is returned by ParseDisposition for a value that is
// not action-mode/sending-mode; type[/modifier[: description]].
var ErrInvalidDisposition = errors.New("mdn: invalid disposition")

// ParseDisposition parses a Disposition field value. It is tolerant of white
// space and case: modes, type and modifier are returned in their canonical
// spelling, known descriptions in lower case (DescUnsupportedMICAlgorithms
// keeps its capitals) with DescUnknownTradingRelationship mapped to
// DescUnknownTradingPartner; other descriptions are kept with their white
// space collapsed. A value without the mode part (no ';') is accepted with
// empty modes.
func ParseDisposition(s string) (Disposition, error) {
	var d Disposition
	raw := s
	s = collapseSpace(sanitize(s))
	if s == "" {
		return d, fmt.Errorf("%w: empty", ErrInvalidDisposition)
	}
	mode, rest, hasMode := strings.Cut(s, ";")
	if !hasMode {
		rest, mode = mode, ""
	}
	if mode != "" {
		action, sending, ok := strings.Cut(mode, "/")
		if !ok {
			return Disposition{}, fmt.Errorf("%w: mode %q has no '/' in %q", ErrInvalidDisposition, mode, raw)
		}
		d.ActionMode = canonicalWord(strings.TrimSpace(action), ActionAutomatic, ActionManual)
		d.SendingMode = canonicalWord(strings.TrimSpace(sending), SendingAutomatic, SendingManual)
		if d.ActionMode == "" || d.SendingMode == "" {
			return Disposition{}, fmt.Errorf("%w: empty mode in %q", ErrInvalidDisposition, raw)
		}
	}
	typeMod, desc, _ := strings.Cut(rest, ":")
	typ, mod, _ := strings.Cut(typeMod, "/")
	d.Type = strings.ToLower(strings.TrimSpace(typ))
	d.Modifier = strings.ToLower(strings.TrimSpace(mod))
	if d.Type == "" || strings.ContainsAny(d.Type, " ;,") {
		return Disposition{}, fmt.Errorf("%w: disposition type %q in %q", ErrInvalidDisposition, d.Type, raw)
	}
	d.Description = canonicalDescription(strings.TrimSpace(desc))
	return d, nil
}

var knownDescriptions = []string{
	DescAuthenticationFailed, DescDecompressionFailed, DescDecryptionFailed,
	DescInsufficientMessageSecurity, DescIntegrityCheckFailed, DescUnexpectedProcessingError,
	DescUnknownTradingPartner, DescDuplicateDocument, DescUnsupportedFormat,
	DescUnsupportedMICAlgorithms, DescSenderEqualsReceiver,
}

func canonicalDescription(desc string) string {
	if strings.EqualFold(desc, DescUnknownTradingRelationship) {
		return DescUnknownTradingPartner
	}
	for _, k := range knownDescriptions {
		if strings.EqualFold(desc, k) {
			return k
		}
	}
	return desc
}

func canonicalWord(s string, known ...string) string {
	for _, k := range known {
		if strings.EqualFold(s, k) {
			return k
		}
	}
	return s
}

// collapseSpace trims s and replaces every run of white space (including
// line breaks of an unfolded field) with one space.
func collapseSpace(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

package receipt

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/as4"
)

// ErrNotReceipt reports a signal message that is neither a receipt nor an
// error signal, or a document that holds no signal at all.
var ErrNotReceipt = errors.New("receipt: not an AS4 receipt")

// Bounds on what ParseReceipt walks, so that a hostile response stays cheap.
const (
	maxChildren   = 1000
	maxTransforms = 16
)

// boundedChildren returns the child elements of el, at most maxChildren.
func boundedChildren(el *etree.Element) ([]*etree.Element, error) {
	kids := el.ChildElements()
	if len(kids) > maxChildren {
		return nil, fmt.Errorf("%w: more than %d elements in <%s>", ErrNotReceipt, maxChildren, el.Tag)
	}
	return kids, nil
}

// Receipt is a parsed AS4 receipt signal.
type Receipt struct {
	// MessageID, RefToMessageID and Timestamp are the signal's MessageInfo.
	MessageID      string
	RefToMessageID string
	Timestamp      time.Time
	// References are the ds:References of the NonRepudiationInformation, in
	// order; empty for a receipt that copies the eb:UserMessage instead.
	References []Reference
	// UserMessage is the eb:UserMessage copied into the receipt, if any.
	UserMessage *etree.Element
	// Signal is the parsed signal message.
	Signal *as4.SignalMessage
}

// SignalError is returned by ParseReceipt when the partner answered with an
// ebMS error signal instead of a receipt.
type SignalError struct {
	MessageID      string
	RefToMessageID string
	Errors         []*as4.Error
}

// Error implements error.
func (e *SignalError) Error() string {
	parts := make([]string, 0, len(e.Errors))
	for _, x := range e.Errors {
		s := x.Code
		if x.ShortDescription != "" {
			s += " " + x.ShortDescription
		}
		if x.Description != "" {
			s += " (" + x.Description + ")"
		}
		if x.Detail != "" {
			s += ": " + x.Detail
		}
		parts = append(parts, s)
	}
	return "receipt: partner returned an ebMS error signal: " + strings.Join(parts, "; ")
}

// ParseReceipt reads the receipt in a SOAP envelope (the synchronous
// response to a user message). It finds the single eb:Messaging header and
// its signal with eb:Receipt, and reads the ds:References listed in
// ebbp:NonRepudiationInformation (entries of other forms are skipped;
// vendor extension elements in eb:Receipt are ignored). An error signal
// gives *SignalError; anything else that is not a receipt wraps
// ErrNotReceipt; a malformed header gives an *as4.Error (EBMS:0009).
// Verifying the receipt's own signature is the caller's business.
func ParseReceipt(doc *etree.Document) (*Receipt, error) {
	env, err := as4.EnvelopeFromDocument(doc)
	if err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	el, err := env.Messaging()
	if err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	m, err := as4.ParseMessaging(el)
	if err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	var sig *as4.SignalMessage
	var errSig *SignalError
	for _, s := range m.SignalMessages {
		switch {
		case s.Receipt != nil:
			if sig != nil {
				return nil, fmt.Errorf("%w: more than one eb:Receipt", ErrNotReceipt)
			}
			sig = s
		case len(s.Errors) > 0 && errSig == nil:
			errSig = &SignalError{MessageID: s.MessageInfo.MessageID, RefToMessageID: s.MessageInfo.RefToMessageID, Errors: s.Errors}
		}
	}
	if sig == nil {
		if errSig != nil {
			return nil, errSig
		}
		return nil, fmt.Errorf("%w: no eb:Receipt signal", ErrNotReceipt)
	}
	r := &Receipt{
		MessageID:      sig.MessageInfo.MessageID,
		RefToMessageID: sig.MessageInfo.RefToMessageID,
		Timestamp:      sig.MessageInfo.Timestamp,
		Signal:         sig,
	}
	nris := 0
	kids, err := boundedChildren(sig.Receipt)
	if err != nil {
		return nil, err
	}
	for _, c := range kids {
		switch {
		case as4.Is(c, as4.NSEbbp, "NonRepudiationInformation"):
			nris++
			if nris > 1 {
				return nil, fmt.Errorf("%w: more than one NonRepudiationInformation", ErrNotReceipt)
			}
			if r.References, err = parseNRI(c); err != nil {
				return nil, err
			}
		case as4.Is(c, as4.NSEbMS, "UserMessage"):
			if r.UserMessage != nil {
				return nil, fmt.Errorf("%w: more than one eb:UserMessage in eb:Receipt", ErrNotReceipt)
			}
			r.UserMessage = c
		}
	}
	if nris == 0 && r.UserMessage == nil {
		return nil, fmt.Errorf("%w: eb:Receipt holds neither NonRepudiationInformation nor eb:UserMessage", ErrNotReceipt)
	}
	return r, nil
}

func parseNRI(nri *etree.Element) ([]Reference, error) {
	var out []Reference
	parts, err := boundedChildren(nri)
	if err != nil {
		return nil, err
	}
	for _, part := range parts {
		if !as4.Is(part, as4.NSEbbp, "MessagePartNRInformation") {
			continue
		}
		kids, err := boundedChildren(part)
		if err != nil {
			return nil, err
		}
		var refs []*etree.Element
		for _, k := range kids {
			if as4.Is(k, as4.NSDSig, "Reference") {
				refs = append(refs, k)
			}
		}
		switch len(refs) {
		case 0:
			continue // ebbp:MessagePartIdentifier form
		case 1:
		default:
			return nil, fmt.Errorf("%w: MessagePartNRInformation with %d ds:Reference", ErrNotReceipt, len(refs))
		}
		ref, err := parseReference(refs[0])
		if err != nil {
			return nil, err
		}
		out = append(out, ref)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: NonRepudiationInformation lists no ds:Reference", ErrNotReceipt)
	}
	return out, nil
}

func parseReference(el *etree.Element) (Reference, error) {
	var r Reference
	var ok bool
	if r.URI, ok = as4.Attr(el, "", "URI"); !ok {
		return r, fmt.Errorf("%w: ds:Reference without URI", ErrNotReceipt)
	}
	kids, err := boundedChildren(el)
	if err != nil {
		return r, err
	}
	for _, c := range kids {
		switch {
		case as4.Is(c, as4.NSDSig, "Transforms"):
			ts, err := boundedChildren(c)
			if err != nil {
				return r, err
			}
			for _, t := range ts {
				if !as4.Is(t, as4.NSDSig, "Transform") {
					continue
				}
				if len(r.Transforms) >= maxTransforms {
					return r, fmt.Errorf("%w: more than %d transforms in ds:Reference %q", ErrNotReceipt, maxTransforms, r.URI)
				}
				tr := Transform{}
				tr.Algorithm, _ = as4.Attr(t, "", "Algorithm")
				in, err := boundedChildren(t)
				if err != nil {
					return r, err
				}
				for _, x := range in {
					if as4.Is(x, NSExcC14N, "InclusiveNamespaces") {
						tr.PrefixList, _ = as4.Attr(x, "", "PrefixList")
					}
				}
				r.Transforms = append(r.Transforms, tr)
			}
		case as4.Is(c, as4.NSDSig, "DigestMethod"):
			r.DigestMethod, _ = as4.Attr(c, "", "Algorithm")
		case as4.Is(c, as4.NSDSig, "DigestValue"):
			r.DigestValue = as4.Text(c)
		}
	}
	if r.DigestMethod == "" || r.DigestValue == "" {
		return r, fmt.Errorf("%w: ds:Reference %q without digest method or value", ErrNotReceipt, r.URI)
	}
	return r, nil
}

// Covers checks that the receipt acknowledges every reference in refs (the
// ds:References our signature made): each must be listed with the same URI,
// digest method and digest value (compared as decoded bytes). A receipt
// without NonRepudiationInformation covers nothing. Failures are
// EBMS:0302 InvalidReceipt.
func (r *Receipt) Covers(refs []Reference) error {
	var missing []string
	for _, want := range refs {
		if !r.lists(want) {
			missing = append(missing, fmt.Sprintf("%q", want.URI))
		}
	}
	if len(missing) > 0 {
		return as4.InvalidReceipt("receipt does not acknowledge "+strings.Join(missing, ", "), nil).WithRef(r.RefToMessageID)
	}
	return nil
}

func (r *Receipt) lists(want Reference) bool {
	wd, werr := decodeDigest(want.DigestValue)
	for _, got := range r.References {
		if got.URI != want.URI || got.DigestMethod != want.DigestMethod {
			continue
		}
		gd, gerr := decodeDigest(got.DigestValue)
		if werr == nil && gerr == nil && len(wd) > 0 && bytes.Equal(wd, gd) {
			return true
		}
	}
	return false
}

func decodeDigest(s string) ([]byte, error) {
	return base64.StdEncoding.DecodeString(strings.Join(strings.Fields(s), ""))
}

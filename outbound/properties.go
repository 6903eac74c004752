package outbound

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Property is one part property of an AS4 message's payload
// (eb:PartInfo/eb:PartProperties/eb:Property): the BDEW profile's
// BDEWDocumentType, BDEWDocumentNo, …, an eDelivery partner's
// CharacterSet. Names are kept as given (case too); the order of a
// message's properties is the order they are sent in.
type Property struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Bounds of a submission's properties (ValidateProperties).
const (
	MaxProperties        = 32
	MaxPropertyName      = 64
	MaxPropertyValueSize = 1024
)

// ReservedProperties are the part properties the AS4 sender writes
// itself on every payload (as4/client: MimeType always, CompressionType
// when it compresses): a submission may not set them (compared without
// case). The file-name property (transmit.AS4Settings.FilenameProperty),
// when a partner's settings name one, is refused when the message is
// sent.
var ReservedProperties = []string{"MimeType", "CompressionType"}

// ValidateProperties checks a submission's properties: at most
// MaxProperties, each name 1–MaxPropertyName characters of A–Z a–z 0–9
// . _ : -, no name twice (compared without case) and none of
// ReservedProperties, each value at most MaxPropertyValueSize bytes of
// UTF-8 without control characters. The error says which property is
// wrong and why.
func ValidateProperties(ps []Property) error {
	if len(ps) > MaxProperties {
		return fmt.Errorf("%d properties: at most %d", len(ps), MaxProperties)
	}
	seen := make(map[string]bool, len(ps))
	for i, p := range ps {
		if err := validName(p.Name); err != nil {
			return fmt.Errorf("property %d: %w", i+1, err)
		}
		for _, r := range ReservedProperties {
			if strings.EqualFold(p.Name, r) {
				return fmt.Errorf("property %q is reserved: the AS4 sender writes %s itself", p.Name, r)
			}
		}
		k := strings.ToLower(p.Name)
		if seen[k] {
			return fmt.Errorf("property %q is given twice", p.Name)
		}
		seen[k] = true
		if len(p.Value) > MaxPropertyValueSize {
			return fmt.Errorf("property %q: value of %d bytes, at most %d", p.Name, len(p.Value), MaxPropertyValueSize)
		}
		if !utf8.ValidString(p.Value) {
			return fmt.Errorf("property %q: value is not UTF-8", p.Name)
		}
		if i := strings.IndexFunc(p.Value, unicode.IsControl); i >= 0 {
			return fmt.Errorf("property %q: value has a control character at byte %d", p.Name, i)
		}
	}
	return nil
}

func validName(n string) error {
	if n == "" {
		return fmt.Errorf("empty name")
	}
	if len(n) > MaxPropertyName {
		return fmt.Errorf("name %.20q… longer than %d characters", n, MaxPropertyName)
	}
	for _, c := range []byte(n) {
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return fmt.Errorf("name %q: only A-Z a-z 0-9 . _ : - are allowed", n)
		}
	}
	return nil
}

// ParseProperty reads NAME=VALUE (the CLI's -property, the API's property
// parameter): the name is up to the first '='.
func ParseProperty(s string) (Property, error) {
	name, value, ok := strings.Cut(s, "=")
	if !ok {
		return Property{}, fmt.Errorf("property %q: want NAME=VALUE", s)
	}
	return Property{Name: name, Value: value}, nil
}

// EqualProperties reports whether a and b are the same properties in the
// same order (nil and empty are equal).
func EqualProperties(a, b []Property) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// EncodeProperties is the stores' column encoding of a message's
// properties: "" for none, else their JSON array.
func EncodeProperties(ps []Property) (string, error) {
	if len(ps) == 0 {
		return "", nil
	}
	b, err := json.Marshal(ps)
	if err != nil {
		return "", fmt.Errorf("outbound: encoding the properties: %w", err)
	}
	return string(b), nil
}

// DecodeProperties reads what EncodeProperties wrote (nil for "").
func DecodeProperties(s string) ([]Property, error) {
	if s == "" {
		return nil, nil
	}
	var ps []Property
	if err := json.Unmarshal([]byte(s), &ps); err != nil {
		return nil, fmt.Errorf("outbound: decoding the properties: %w", err)
	}
	if len(ps) == 0 {
		return nil, nil
	}
	return ps, nil
}

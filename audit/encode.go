package audit

import (
	"encoding/json"
	"time"
	"unicode/utf8"
)

// appendRecordJSON appends r as json.Marshal encodes it, byte for byte,
// without reflection: the JSON-lines file encodes every record of every
// message (five per AS2 message), and json.Marshal's reflection was most
// of that cost. A time json.Marshal refuses or formats otherwise (a year
// outside 0–9999, a zone offset in seconds) goes through json.Marshal.
func appendRecordJSON(b []byte, r Record) ([]byte, error) {
	if y := r.Time.Year(); y < 0 || y > 9999 {
		return appendMarshal(b, r)
	}
	if _, off := r.Time.Zone(); off%60 != 0 {
		return appendMarshal(b, r)
	}
	b = append(b, `{"time":"`...)
	b = r.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","step":`...)
	b = appendJSONString(b, string(r.Step))
	b = append(b, `,"partner":`...)
	b = appendJSONString(b, r.Partner)
	b = append(b, `,"protocol":`...)
	b = appendJSONString(b, r.Protocol)
	b = append(b, `,"message_id":`...)
	b = appendJSONString(b, r.MessageID)
	for _, f := range [...]struct{ name, v string }{
		{`,"key":`, r.Key}, {`,"interchange_key":`, r.InterchangeKey}, {`,"reference":`, r.Reference},
		{`,"decision":`, r.Decision}, {`,"payload_sha256":`, r.PayloadSHA256}, {`,"disposition":`, r.Disposition},
		{`,"error":`, r.Error}, {`,"incident":`, r.Incident}, {`,"actor":`, r.Actor},
	} {
		if f.v != "" {
			b = append(b, f.name...)
			b = appendJSONString(b, f.v)
		}
	}
	return append(b, '}'), nil
}

func appendMarshal(b []byte, r Record) ([]byte, error) {
	line, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return append(b, line...), nil
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s quoted as encoding/json does (HTML-escaped:
// < > & as \u003c \u003e \u0026, invalid UTF-8 as \ufffd, U+2028 and
// U+2029 escaped).
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

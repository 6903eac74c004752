// Package base64body decodes the base64 body of a MIME part as it is read,
// without a cleaned copy of the encoded bytes. AS2 (smime) and AS4 (as4)
// parts share it.
package base64body

import (
	"encoding/base64"
	"io"
)

// NewDecoder returns a reader of the bytes that the base64 text in r
// encodes, skipping the white space senders put in it (line breaks, and the
// spaces and tabs some add).
//
// '=' padding ends the text (RFC 2045 §6.8): base64 text after it (two
// blocks of base64 one after the other, "QQ==QUJD") is refused with a
// base64.CorruptInputError at the offset of the first character after the
// padding, counted in the bytes of r. The verdict is the same however r
// splits the body into reads, and it is the one smime's in-memory decoder
// gives; encoding/base64's stream decoder alone decodes past the padding
// or refuses depending on where the reads end.
func NewDecoder(r io.Reader) io.Reader {
	return base64.NewDecoder(base64.StdEncoding, &textFilter{r: r})
}

// textFilter drops white space from r and fails at base64 text after '='
// padding (more '=' may follow the padding: the decoder refuses those
// itself, whatever the reads).
type textFilter struct {
	r      io.Reader
	off    int64 // bytes read from r so far
	padded bool  // an '=' has been read
	err    error // the refusal, once made
}

func (f *textFilter) Read(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	for {
		n, err := f.r.Read(p)
		k := 0
		for i, c := range p[:n] {
			switch c {
			case ' ', '\t', '\r', '\n':
				continue
			case '=':
				f.padded = true
			default:
				if f.padded {
					f.err = base64.CorruptInputError(f.off + int64(i))
					return k, f.err
				}
			}
			p[k] = c
			k++
		}
		f.off += int64(n)
		if k > 0 || err != nil {
			return k, err
		}
	}
}

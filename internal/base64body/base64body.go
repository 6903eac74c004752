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
func NewDecoder(r io.Reader) io.Reader {
	return base64.NewDecoder(base64.StdEncoding, &spaceFilter{r: r})
}

// spaceFilter drops white space from r.
type spaceFilter struct{ r io.Reader }

func (f *spaceFilter) Read(p []byte) (int, error) {
	for {
		n, err := f.r.Read(p)
		k := 0
		for _, c := range p[:n] {
			switch c {
			case ' ', '\t', '\r', '\n':
			default:
				p[k] = c
				k++
			}
		}
		if k > 0 || err != nil {
			return k, err
		}
	}
}

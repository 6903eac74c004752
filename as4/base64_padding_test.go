package as4

import (
	"bytes"
	"encoding/base64"
	"io"
	"testing"
	"testing/iotest"
)

// chunkedBody returns at most n bytes per Read, as TCP may deliver them.
type chunkedBody struct {
	r io.Reader
	n int
}

func (c chunkedBody) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

// TestReadMessageBase64TextAfterPaddingSameVerdictHoweverItArrives: an
// attachment whose base64 text goes on after '=' padding is refused as a
// MIME inconsistency whether the message is read whole, a byte at a time
// or in small pieces; before the fix it was refused read whole and
// accepted (decoded past the padding) a byte at a time. A well-formed
// base64 attachment decodes to the same bytes each way.
func TestReadMessageBase64TextAfterPaddingSameVerdictHoweverItArrives(t *testing.T) {
	m := defaultTestMessage()
	m.partInfo = `<eb:PartInfo href="cid:payload-1@sender.example"/>`
	block := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("UNB+UNOC:3'"), 300))
	arrivals := map[string]func([]byte) io.Reader{
		"whole":            func(b []byte) io.Reader { return bytes.NewReader(b) },
		"a byte at a time": func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) },
		"3 bytes a read":   func(b []byte) io.Reader { return chunkedBody{bytes.NewReader(b), 3} },
		"1000 bytes a read": func(b []byte) io.Reader {
			return chunkedBody{bytes.NewReader(b), 1000}
		},
	}
	for _, body := range []string{"QQ==QUJD", "QQ==\r\nQUJD\r\n", "QUI=\r\n" + block, block + "\r\nQQ==\r\n" + block} {
		ct, msg := multipartMessage("b1", m.envelope(),
			testPart{cid: "payload-1@sender.example", contentType: "application/EDIFACT", cte: "base64", body: []byte(body)})
		for how, arrive := range arrivals {
			env, err := ReadMessage(ct, arrive(msg), Limits{})
			if err == nil {
				got := partBytes(t, &env.Attachments[0])
				env.Close()
				t.Errorf("%.20q… read %s: accepted, part decoded to %d bytes", body, how, len(got))
				continue
			}
			if CodeOf(err) != CodeMimeInconsistency {
				t.Errorf("%.20q… read %s: %v, want a MIME inconsistency", body, how, err)
			}
		}
	}
	ct, msg := multipartMessage("b1", m.envelope(),
		testPart{cid: "payload-1@sender.example", contentType: "application/EDIFACT", cte: "base64", body: []byte(block + "\r\nQQ==\r\n")})
	want := append(bytes.Repeat([]byte("UNB+UNOC:3'"), 300), 'A')
	for how, arrive := range arrivals {
		env, err := ReadMessage(ct, arrive(msg), Limits{})
		if err != nil {
			t.Errorf("well-formed part read %s: %v", how, err)
			continue
		}
		if got := partBytes(t, &env.Attachments[0]); !bytes.Equal(got, want) {
			t.Errorf("well-formed part read %s: %d bytes, want %d", how, len(got), len(want))
		}
		env.Close()
	}
}

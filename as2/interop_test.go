package as2

import (
	"bytes"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/interop"
	"github.com/edigateway/gateway/mdn"
)

// capture is an AS2 request stored by the origin library: LF header lines,
// an empty line, the body.
type capture struct {
	header http.Header
	body   []byte
}

// readCapture splits an .as2 vector into the request headers the endpoint
// needs (transport fields such as Content-Length and Host are left to the
// HTTP client) and the body.
func readCapture(t *testing.T, raw []byte) capture {
	t.Helper()
	h := http.Header{}
	rest := raw
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			t.Fatal("capture: no end of header block")
		}
		line := strings.TrimRight(string(rest[:i]), "\r")
		rest = rest[i+1:]
		if line == "" {
			break
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			t.Fatalf("capture: header line %q", line)
		}
		switch strings.ToLower(name) {
		case "content-length", "host", "connection", "expect", "transfer-encoding", "user-agent":
			if strings.EqualFold(name, "content-length") {
				h.Set("X-Captured-Length", strings.TrimSpace(value))
			}
			continue
		}
		h.Add(name, strings.TrimSpace(value))
	}
	return capture{header: h, body: rest}
}

// repairQuirk1 undoes the LF conversion of mecas2_signed.as2: every LF
// outside the payload bytes becomes CRLF again (README quirk 1).
func repairQuirk1(t *testing.T, body, payload []byte) []byte {
	t.Helper()
	i := bytes.Index(body, payload)
	if i < 0 {
		t.Fatal("quirk 1: payload not found in the body")
	}
	crlf := func(b []byte) []byte { return bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n")) }
	var out []byte
	out = append(out, crlf(body[:i])...)
	out = append(out, payload...)
	return append(out, crlf(body[i+len(payload):])...)
}

// TestInteropVendorMessages posts every mendelson message of the interop
// set to the endpoint, configured as pyas2lib with mendelson as partner:
// the handler receives payload.txt, the MDN carries the sender's MIC, and
// the retransmission gets the duplicate MDN with the same MIC.
func TestInteropVendorMessages(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(interop.Dir(t), "as2")
	payload := interop.Read(t, "as2/payload.txt")
	kp, err := cms.ParseKeyPair(interop.Read(t, "as2/cert_test_public.pem"), interop.Read(t, "as2/cert_test_key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	mecas2 := "id: mecas2\nname: mendelson test\nas2:\n  as2_id: mecas2\n  our_as2_id: pyas2lib\n  certificates: [" +
		strconv.Quote(filepath.Join(dir, "cert_mecas2_public.pem")) + "]\n" +
		// The vendor's vectors include signed-only and encrypted-only messages.
		"  require_signature: false\n  require_encryption: false\n"
	// The clock is pinned to the messages' own date.
	e := newEnv(t, envOptions{keys: []cms.KeyPair{kp}, ourID: "pyas2lib",
		extraPartners: map[string]string{"mecas2.yaml": mecas2},
		now:           func() time.Time { return time.Date(2022, 1, 4, 14, 0, 0, 0, time.UTC) }})

	for _, c := range []struct {
		file, mic string
		repair    bool
		layers    string
	}{
		{"mecas2_signed.as2", "G6PhshLOERWJEIfypIh6Q3sno6cBUWJBDky1igJvDMo=", true, "signed"},
		{"mecas2_compressed.as2", "14SZThwSYUH4aPdkglDwdRFnKUFmgjKsJFZWcSXBTww=", false, "signed,compressed"},
		{"mecas2_encrypted.as2", "NZ0XtRNO0lTldQhKy9c+Dk27CIsuhZX+BGmE2cV6xQk=", false, "encrypted"},
		{"mecas2_signed_encrypted.as2", "G6PhshLOERWJEIfypIh6Q3sno6cBUWJBDky1igJvDMo=", false, "encrypted,signed"},
	} {
		t.Run(c.file, func(t *testing.T) {
			capt := readCapture(t, interop.Read(t, "as2/"+c.file))
			body := capt.body
			if c.repair {
				body = repairQuirk1(t, body, payload)
			}
			if strconv.Itoa(len(body)) != capt.header.Get("X-Captured-Length") {
				t.Fatalf("body is %d bytes, Content-Length was %s", len(body), capt.header.Get("X-Captured-Length"))
			}
			capt.header.Del("X-Captured-Length")
			id := capt.header.Get("Message-Id")
			for n, want := range []mdn.Disposition{mdn.DispProcessed, mdn.DispDuplicateDocument} {
				resp, rb := e.post(t, capt.header.Clone(), body)
				if resp.StatusCode != 200 {
					t.Fatalf("send %d: HTTP %d %s", n+1, resp.StatusCode, rb)
				}
				p, err := mdn.ParseHTTP(resp.Header, rb)
				if err != nil {
					t.Fatalf("send %d: MDN: %v\n%s", n+1, err, rb)
				}
				r := p.Report
				if p.Signed || r.Disposition.String() != want.String() || r.MIC != c.mic || p.Fields.Get("Received-Content-MIC") != c.mic+", sha-256" {
					t.Fatalf("send %d: signed %v, disposition %q, MIC %q (%q)\n%s", n+1, p.Signed, r.Disposition, r.MIC, p.Fields.Get("Received-Content-MIC"), rb)
				}
				if r.OriginalMessageID != id || r.AS2From != "pyas2lib" || r.AS2To != "mecas2" || r.FinalRecipient != "pyas2lib" {
					t.Fatalf("send %d: MDN addressing %+v", n+1, r)
				}
			}
			if n := e.handler.count(id); n != 1 {
				t.Fatalf("handler ran %d times", n)
			}
			if got := e.handler.payloads(id); len(got) != 1 || !bytes.Equal(got[0], payload) {
				t.Fatalf("handler got %q", got)
			}
			if !strings.Contains(e.logs.String(), `"layers":"`+c.layers+`"`) {
				t.Errorf("layers %s not logged", c.layers)
			}
		})
	}

	// Without the harness repair, the smime layer's line-ending fallback
	// still verifies the stored capture, and the MIC is the sender's.
	t.Run("mecas2_signed.as2 as stored", func(t *testing.T) {
		capt := readCapture(t, interop.Read(t, "as2/mecas2_signed.as2"))
		capt.header.Del("X-Captured-Length")
		capt.header.Set("Message-Id", "<unrepaired-copy@mecas2>")
		resp, rb := e.post(t, capt.header, capt.body)
		p, err := mdn.ParseHTTP(resp.Header, rb)
		if err != nil {
			t.Fatal(err)
		}
		if p.Report.Disposition.String() != mdn.DispProcessed.String() || p.Report.MIC != "G6PhshLOERWJEIfypIh6Q3sno6cBUWJBDky1igJvDMo=" {
			t.Fatalf("disposition %q MIC %q", p.Report.Disposition, p.Report.MIC)
		}
	})
}

package as4

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/spooltest"
)

// gatedReader hands out its bytes up to gate, then waits for open (or
// fails with cut once that is set instead).
type gatedReader struct {
	r    *bytes.Reader
	gate int64
	open chan struct{}
	cut  error
}

func (g *gatedReader) Read(p []byte) (int, error) {
	if pos := g.r.Size() - int64(g.r.Len()); pos >= g.gate {
		<-g.open
		if g.cut != nil {
			return 0, g.cut
		}
	} else if rest := g.gate - pos; int64(len(p)) > rest {
		p = p[:rest]
	}
	return g.r.Read(p)
}

// TestReadMessageReturnsWhileAttachmentArrives: with StreamAttachment,
// ReadMessage returns once the streamed part begins; its Content gives the
// bytes as they arrive and waits for the rest; the parts after it appear
// in Attachments only after Rest, which reports the rest of the body's
// outcome (here: a part over MaxPartSize, a cut body, a duplicate
// Content-ID); Close waits for the reading and removes every file. A small
// part and a part StreamAttachment declines are read as before.
func TestReadMessageReturnsWhileAttachmentArrives(t *testing.T) {
	m := defaultTestMessage()
	big := bytes.Repeat([]byte("UNH+1+INVOIC:D:96A:UN'"), 40_000) // 880 KB
	small := []byte("UNB+UNOA:2+X+Y'")
	stream := func(cid string) func(*Envelope, string) bool {
		return func(_ *Envelope, c string) bool { return c == cid }
	}
	t.Run("arriving, then parts after it", func(t *testing.T) {
		ct, body := multipartMessage("b7", m.envelope(),
			testPart{cid: "big@x", contentType: "application/octet-stream", cte: "binary", body: big},
			testPart{cid: "after@x", contentType: "text/plain", cte: "binary", body: small})
		dir := t.TempDir()
		cut := int64(bytes.Index(body, big) + 300_000)
		g := &gatedReader{r: bytes.NewReader(body), gate: cut, open: make(chan struct{})}
		env, err := ReadMessage(ct, g, Limits{SpoolDir: dir, StreamAttachment: stream("big@x")})
		if err != nil {
			t.Fatal(err)
		}
		defer env.Close()
		if !env.Arriving() || len(env.Attachments) != 1 || env.Attachments[0].ContentID != "big@x" {
			t.Fatalf("arriving %v, attachments %d", env.Arriving(), len(env.Attachments))
		}
		rc, err := env.Attachments[0].Open()
		if err != nil {
			t.Fatal(err)
		}
		// What has arrived is readable before the rest comes.
		head := make([]byte, 100_000)
		if _, err := io.ReadFull(rc, head); err != nil || !bytes.Equal(head, big[:len(head)]) {
			t.Fatalf("arrived bytes: %v", err)
		}
		time.AfterFunc(50*time.Millisecond, func() { close(g.open) })
		rest, err := io.ReadAll(rc)
		if err != nil || !bytes.Equal(append(head, rest...), big) {
			t.Fatalf("the whole part: %d bytes, %v", len(head)+len(rest), err)
		}
		if err := env.Rest(); err != nil {
			t.Fatal(err)
		}
		if len(env.Attachments) != 2 || !bytes.Equal(partBytes(t, &env.Attachments[1]), small) || !bytes.Equal(partBytes(t, &env.Attachments[0]), big) {
			t.Fatalf("after Rest: %d attachments", len(env.Attachments))
		}
		if err := env.Close(); err != nil {
			t.Fatal(err)
		}
		if left := spooltest.Leftovers(t, dir); len(left) != 0 {
			t.Fatalf("files left after Close: %v", left)
		}
	})
	for _, tc := range []struct {
		name  string
		parts []testPart
		lim   Limits
		cut   error
		want  func(error) bool
	}{
		{"part over its limit", []testPart{{cid: "big@x", contentType: "application/octet-stream", cte: "binary", body: big}},
			Limits{MaxPartSize: 500_000}, nil, func(err error) bool { return errors.Is(err, ErrLimit) && !errors.Is(err, ErrMessageLimit) }},
		{"message over its limit", []testPart{{cid: "big@x", contentType: "application/octet-stream", cte: "binary", body: big}},
			Limits{MaxMessageSize: 700_000}, nil, func(err error) bool { return errors.Is(err, ErrMessageLimit) }},
		{"body cut", []testPart{{cid: "big@x", contentType: "application/octet-stream", cte: "binary", body: big}},
			Limits{}, io.ErrUnexpectedEOF, func(err error) bool { return AsError(err).Code == CodeMimeInconsistency }},
		{"duplicate Content-ID after it", []testPart{{cid: "big@x", contentType: "application/octet-stream", cte: "binary", body: big},
			{cid: "big@x", contentType: "text/plain", cte: "binary", body: small}},
			Limits{}, nil, func(err error) bool { return AsError(err).Code == CodeMimeInconsistency }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct, body := multipartMessage("b8", m.envelope(), tc.parts...)
			dir := t.TempDir()
			g := &gatedReader{r: bytes.NewReader(body), gate: int64(bytes.Index(body, big) + 200_000), open: make(chan struct{}), cut: tc.cut}
			lim := tc.lim
			lim.SpoolDir, lim.StreamAttachment = dir, stream("big@x")
			env, err := ReadMessage(ct, g, lim)
			if err != nil || !env.Arriving() {
				t.Fatalf("ReadMessage: %v, arriving %v", err, env.Arriving())
			}
			close(g.open)
			rc, _ := env.Attachments[0].Open()
			if _, rerr := io.ReadAll(rc); rerr == nil && tc.cut != nil {
				t.Fatal("the part of a cut body read to its end without an error")
			}
			if err := env.Rest(); err == nil || !tc.want(err) {
				t.Fatalf("Rest: %v", err)
			}
			env.Close()
			if left := spooltest.Leftovers(t, dir); len(left) != 0 {
				t.Fatalf("files left after Close: %v", left)
			}
		})
	}
	t.Run("small or declined parts are read before ReadMessage returns", func(t *testing.T) {
		ct, body := multipartMessage("b6", m.envelope(),
			testPart{cid: "small@x", contentType: "text/plain", cte: "binary", body: small},
			testPart{cid: "big@x", contentType: "application/octet-stream", cte: "binary", body: big})
		env, err := ReadMessage(ct, bytes.NewReader(body), Limits{SpoolDir: t.TempDir(), StreamAttachment: stream("small@x")})
		if err != nil {
			t.Fatal(err)
		}
		defer env.Close()
		if env.Arriving() || len(env.Attachments) != 2 || !bytes.Equal(partBytes(t, &env.Attachments[0]), small) || !bytes.Equal(partBytes(t, &env.Attachments[1]), big) {
			t.Fatalf("arriving %v, %d attachments", env.Arriving(), len(env.Attachments))
		}
	})
}

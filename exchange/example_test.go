package exchange_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/edigateway/gateway/exchange"
)

// fileDrop is a business handler that hands every payload to a back-office
// system through a drop directory, one file per document.
//
// The gateway accepts each message exactly once, but runs its handler at
// least once per accepted message: when the gateway crashes (or its store
// fails) after Handle wrote the file and before the accept was recorded, the
// partner's retransmission runs Handle again. fileDrop is idempotent on the
// key it is given: a payload's file is named by Payload.IdempotencyKey (the
// same for every retransmission of the message and for the same EDIFACT or
// X12 interchange resent under a new message id), and a file already there
// is left alone. It writes to a temporary name first and renames, so that
// the back office never reads half a document.
type fileDrop struct{ dir string }

func (d fileDrop) Handle(ctx context.Context, m *exchange.Message) error {
	for _, p := range m.Payloads {
		final := filepath.Join(d.dir, p.IdempotencyKey+".edi")
		if _, err := os.Stat(final); err == nil {
			continue // written by an earlier run for the same document
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("drop %s: %w", final, err)
		}
		if err := d.write(final, p); err != nil {
			// The partner is asked to retransmit (AS2: HTTP 503 with
			// Retry-After, no MDN; AS4: EBMS:0004 with HTTP 500) and its
			// retransmission runs Handle again.
			return fmt.Errorf("drop payload %s of %s: %w", p.ContentID, m.MessageID, err)
		}
	}
	return nil
}

func (d fileDrop) write(final string, p exchange.Payload) error {
	r, err := p.Open()
	if err != nil {
		return err
	}
	defer r.Close()
	tmp, err := os.CreateTemp(d.dir, ".incoming-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := io.Copy(tmp, r); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), final)
}

// A business handler (the gateway's plug-in interface) that is idempotent
// on the keys the gateway gives it, so that its effect is exactly once even
// though it may run twice for one message. The gateway calls Handle with a
// verified, decrypted, decompressed message; here it is called twice with
// the same message, as after a crash between the handler's side effect and
// the gateway's accept.
func ExampleHandler() {
	dir, err := os.MkdirTemp("", "erp-drop-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	var h exchange.Handler = fileDrop{dir: dir}

	// What the AS2 endpoint would hand over for one signed and encrypted
	// EDIFACT invoice (the gateway sets both idempotency keys).
	invoice := []byte("UNB+UNOC:3+SENDER+GATEWAY+261204:1200+42'UNH+1+INVOIC:D:96A:UN'UNT+2+1'UNZ+1+42'")
	m := &exchange.Message{
		Partner:        "acme",
		Protocol:       exchange.AS2,
		MessageID:      "20261204120000.42@acme.example",
		Received:       time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC),
		IdempotencyKey: "5d41402abc4b2a76b9719d911017c592a94d4e6e2c6b7cd0a5d2f1c1d6f0a001",
		Payloads: []exchange.Payload{exchange.NewPayload(exchange.Payload{
			ContentType:    "application/edifact",
			Size:           int64(len(invoice)),
			IdempotencyKey: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		}, exchange.MemoryBody(invoice))},
	}

	for run := 1; run <= 2; run++ {
		if err := h.Handle(context.Background(), m); err != nil {
			fmt.Println(err)
			return
		}
		names, _ := filepath.Glob(filepath.Join(dir, "*.edi"))
		fmt.Printf("run %d: %d document(s) in the drop directory\n", run, len(names))
	}
	b, _ := os.ReadFile(filepath.Join(dir, m.Payloads[0].IdempotencyKey+".edi"))
	fmt.Println(string(b[:3]), len(b) == len(invoice))
	// Output:
	// run 1: 1 document(s) in the drop directory
	// run 2: 1 document(s) in the drop directory
	// UNB true
}

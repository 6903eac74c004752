package exchange

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/edigateway/gateway/dedup"
)

// InterchangeDuplicate describes an interchange that was already accepted
// under another transport id.
type InterchangeDuplicate struct {
	Interchange dedup.Interchange
	FirstSeen   time.Time
	Retries     int
}

// InterchangeDuplicateReplies is implemented by protocols whose positive
// reply to a message whose every interchange was already accepted (a resend
// under a new transport id) differs from Accepted, such as AS2's
// processed/warning: duplicate-document MDN. Protocols without it answer
// with Accepted.
type InterchangeDuplicateReplies interface {
	DuplicateInterchange(ctx context.Context, dups []InterchangeDuplicate) (Reply, error)
}

// payloadInterchange ties a business envelope to the payload it came from.
type payloadInterchange struct {
	payload int
	ic      dedup.Interchange
	hash    string
}

// quarantine keeps drifted payloads and a JSON description beside them
// under <Quarantine>/<partner>/: <base>.payload, then <base>.2.payload ...
// for a message's further payloads; the description lists them in order
// with their hashes, and payload_sha256 is info.got (for a message, the
// hash over its payloads' hashes, PayloadSHA256).
func (p *Pipeline) quarantine(m *Message, pls []Payload, info driftInfo) (string, error) {
	if p.Quarantine == "" {
		return "", errors.New("exchange: on_drift quarantine needs a quarantine directory")
	}
	if len(pls) == 0 {
		pls = []Payload{{}} // an empty message: one empty file
	}
	dir := filepath.Join(p.Quarantine, m.Partner)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", fmt.Errorf("exchange: quarantine: %w", err)
	}
	// One item per transport key and payload hash: a retransmission of the
	// same drifted message finds its payloads already kept.
	base := fmt.Sprintf("%s-%s", string(m.TransportKey)[:min(16, len(m.TransportKey))], info.got[:min(16, len(info.got))])
	path := filepath.Join(dir, base+".payload")
	if _, err := os.Stat(base2json(path)); err == nil {
		return path, nil
	}
	type listed struct {
		File        string `json:"file"`
		SHA256      string `json:"sha256"`
		ContentType string `json:"content_type"`
		Filename    string `json:"filename"`
	}
	var list []listed
	for i, pl := range pls {
		name := quarantineFile(base, i)
		fp := filepath.Join(dir, name)
		os.Remove(fp) // payloads without their description are a write cut short
		r, err := pl.Open()
		if err != nil {
			return "", fmt.Errorf("exchange: quarantine: %w", err)
		}
		err = writeFileSync(fp, r)
		r.Close()
		if err != nil {
			return "", fmt.Errorf("exchange: quarantine: %w", err)
		}
		list = append(list, listed{File: name, SHA256: pl.SHA256, ContentType: pl.ContentType, Filename: pl.Filename})
	}
	meta, _ := json.MarshalIndent(map[string]any{
		"partner": m.Partner, "protocol": m.Protocol, "message_id": m.MessageID, "what": info.what,
		"reference": info.reference, "stored_sha256": info.stored, "payload_sha256": info.got,
		"first_seen": info.firstSeen.UTC(), "quarantined": p.now().UTC(), "content_type": pls[0].ContentType, "filename": pls[0].Filename,
		"payloads": list,
	}, "", "  ")
	if err := writeFileSync(base2json(path), bytes.NewReader(meta)); err != nil {
		return "", fmt.Errorf("exchange: quarantine: %w", err)
	}
	return path, nil
}

// quarantineFile names payload i (from 0) of a quarantine item (the
// console's ItemPayloadFile reads the same names).
func quarantineFile(base string, i int) string {
	if i == 0 {
		return base + ".payload"
	}
	return fmt.Sprintf("%s.%d.payload", base, i+1)
}

func base2json(payloadPath string) string {
	return payloadPath[:len(payloadPath)-len(".payload")] + ".json"
}

func writeFileSync(path string, r io.Reader) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

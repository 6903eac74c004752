// Package inbox is the built-in "dir" handler: every payload is written
// atomically under <root>/<partner>/, never overwriting a file.
package inbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gateway/exchange"
)

// Dir writes payloads to files. File names are derived from the transport
// key, so a handler run repeated for the same message (after a crash between
// write and accept) finds its own files and succeeds without a second copy.
type Dir struct {
	Root string
}

// Handle implements exchange.Handler.
func (d Dir) Handle(ctx context.Context, m *exchange.Message) error {
	dir := filepath.Join(d.Root, m.Partner)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	for i, p := range m.Payloads {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("inbox: %w", err)
		}
		name := FileName(m, i)
		if err := writeOnce(dir, name, p); err != nil {
			return fmt.Errorf("inbox: payload %d of %s from %s: %w", i+1, m.MessageID, m.Partner, err)
		}
	}
	return syncDir(dir)
}

// FileName is the name payload i of m gets: the first 16 hex digits of the
// transport key, the first 12 of the payload's SHA-256, and a sanitised
// sender file name. It does not depend on the payload's position, which
// shifts when business dedup leaves out payloads of interchanges accepted
// before; a repeated run for the same message therefore always finds its
// own files.
func FileName(m *exchange.Message, i int) string {
	p := m.Payloads[i]
	base := p.Filename
	if base == "" {
		base = p.ContentID
	}
	base = sanitize(base)
	if base == "" {
		base = "payload" + extension(p.ContentType)
	}
	return fmt.Sprintf("%s-%s-%s", string(m.TransportKey)[:min(16, len(m.TransportKey))], p.SHA256[:min(12, len(p.SHA256))], base)
}

func extension(ct string) string {
	ct = strings.ToLower(ct)
	switch {
	case strings.Contains(ct, "xml"):
		return ".xml"
	case strings.Contains(ct, "edifact"), strings.Contains(ct, "edi-consent"), strings.Contains(ct, "x12"):
		return ".edi"
	case strings.HasPrefix(ct, "text/"):
		return ".txt"
	}
	return ".bin"
}

// sanitize keeps a file name safe: no directories, no dot files, a limited
// character set and length.
func sanitize(s string) string {
	s = filepath.Base(strings.ReplaceAll(s, "\\", "/"))
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	out := strings.TrimLeft(b.String(), ".")
	if len(out) > 100 {
		out = out[len(out)-100:]
	}
	return out
}

// writeOnce writes p to dir/name through a synced temporary file and a hard
// link, which fails instead of replacing an existing file. An existing file
// with the same content is this message's own earlier write.
func writeOnce(dir, name string, p exchange.Payload) error {
	final := filepath.Join(dir, name)
	tmp, err := os.CreateTemp(dir, ".tmp-"+name+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	r, err := p.Open()
	if err != nil {
		tmp.Close()
		return err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(tmp, h), r)
	r.Close()
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if err := os.Link(tmp.Name(), final); err != nil {
		if !errors.Is(err, os.ErrExist) {
			return err
		}
		same, serr := sameContent(final, sum)
		if serr != nil {
			return serr
		}
		if !same {
			return fmt.Errorf("%s exists with other content; refusing to overwrite", final)
		}
	}
	return nil
}

func sameContent(path, sum string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return false, err
	}
	return bytes.Equal([]byte(hex.EncodeToString(h.Sum(nil))), []byte(sum)), nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("inbox: sync %s: %w", dir, err)
	}
	return nil
}

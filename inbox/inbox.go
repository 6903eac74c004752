// Package inbox is the built-in "dir" handler: every payload is written
// atomically under <root>/<partner>/, never overwriting a file, next to a
// JSON sidecar with its metadata.
//
// A payload's file name starts with the partner's message id and the
// interchange reference (when the payload carries one), so that an operator
// can find it from either; both are sanitised (safe characters only, bounded
// length). The rest of the name keeps it unique and idempotent per message:
// the first 16 hex digits of the transport key, the first 12 of the
// payload's SHA-256, and the sender's file name (sanitised, extension kept):
//
//	<message id>[_<reference>]-<key16>-<sha12>-<filename>
//	<same>.meta.json
package inbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/edigateway/gateway/exchange"
)

// SidecarSuffix ends the name of every payload's metadata file. A sender's
// file name never ends in it (sanitize rewrites it), so that a payload is
// never taken for a sidecar.
const SidecarSuffix = ".meta.json"

// Name bounds.
const (
	maxIDLen   = 64
	maxRefLen  = 40
	maxBaseLen = 90
)

// Dir writes payloads to files. File names are derived from the message id,
// the interchange reference, the transport key and the payload hash, so a
// handler run repeated for the same message (after a crash between write and
// accept) finds its own files and succeeds without a second copy.
type Dir struct {
	Root string
}

// Handle implements exchange.Handler.
func (d Dir) Handle(ctx context.Context, m *exchange.Message) error {
	dir := filepath.Join(d.Root, m.Partner)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	for i := range m.Payloads {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("inbox: %w", err)
		}
		if err := writePayload(dir, m, i); err != nil {
			return fmt.Errorf("inbox: payload %d of %s from %s: %w", i+1, m.MessageID, m.Partner, err)
		}
	}
	return syncDir(dir)
}

// writePayload writes the sidecar and the payload: both are written and
// synced at the same time (their syncs overlap instead of following each
// other), and the sidecar gets its name first, so a consumer that sees a
// payload file finds its sidecar. A payload written by a version before
// the findable names (legacy name, same content) counts as written.
func writePayload(dir string, m *exchange.Message, i int) error {
	p := m.Payloads[i]
	name := FileName(m, i)
	if legacy := filepath.Join(dir, LegacyFileName(m, i)); legacy != filepath.Join(dir, name) {
		if same, err := sameContent(legacy, p.SHA256); err == nil && same {
			return nil
		}
	}
	side, err := json.MarshalIndent(SidecarOf(m, i), "", "  ")
	if err != nil {
		return err
	}
	side = append(side, '\n')
	var ss *staged
	var serr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		ss, serr = stage(dir, name+SidecarSuffix, exchange.NewPayload(exchange.Payload{}, exchange.MemoryBody(side)))
	}()
	ps, perr := stage(dir, name, p)
	<-done
	defer ss.discard()
	defer ps.discard()
	if serr != nil {
		return fmt.Errorf("sidecar: %w", serr)
	}
	if perr != nil {
		return perr
	}
	// An existing sidecar is this message's own from an earlier run (the
	// name holds the transport key and the payload hash); it is kept.
	if err := ss.link(true); err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	return ps.link(false)
}

// Sidecar is the JSON metadata file written next to every payload.
type Sidecar struct {
	File      string    `json:"file"`
	Partner   string    `json:"partner"`
	Protocol  string    `json:"protocol"`
	MessageID string    `json:"message_id"`
	Received  time.Time `json:"received"`
	// MessageIdempotencyKey is Message.IdempotencyKey, IdempotencyKey the
	// payload's.
	MessageIdempotencyKey string              `json:"message_idempotency_key"`
	IdempotencyKey        string              `json:"idempotency_key"`
	ContentType           string              `json:"content_type,omitempty"`
	Filename              string              `json:"filename,omitempty"`
	ContentID             string              `json:"content_id,omitempty"`
	Size                  int64               `json:"size"`
	SHA256                string              `json:"sha256"`
	Payload               int                 `json:"payload"`
	Payloads              int                 `json:"payloads"`
	Interchange           *SidecarInterchange `json:"interchange,omitempty"`
	Headers               map[string][]string `json:"headers,omitempty"`
	Properties            map[string]string   `json:"properties,omitempty"`
}

// SidecarInterchange is the business envelope of a payload.
type SidecarInterchange struct {
	Key       string `json:"key"`
	Standard  string `json:"standard"`
	Sender    string `json:"sender,omitempty"`
	Recipient string `json:"recipient,omitempty"`
	Reference string `json:"reference"`
	Date      string `json:"date,omitempty"`
	Type      string `json:"type,omitempty"`
}

// SidecarOf is the metadata of payload i of m.
func SidecarOf(m *exchange.Message, i int) Sidecar {
	p := m.Payloads[i]
	s := Sidecar{File: FileName(m, i), Partner: m.Partner, Protocol: string(m.Protocol), MessageID: m.MessageID,
		Received: m.Received.UTC(), MessageIdempotencyKey: m.IdempotencyKey, IdempotencyKey: p.IdempotencyKey,
		ContentType: p.ContentType, Filename: p.Filename, ContentID: p.ContentID, Size: p.Size, SHA256: p.SHA256,
		Payload: i + 1, Payloads: len(m.Payloads), Properties: p.Properties}
	if len(m.Headers) > 0 {
		s.Headers = map[string][]string(m.Headers)
	}
	if ic, ok := m.PayloadInterchange(i); ok {
		s.Interchange = &SidecarInterchange{Key: string(ic.Key), Standard: ic.Standard, Sender: ic.Sender,
			Recipient: ic.Recipient, Reference: ic.Reference, Date: ic.Date, Type: ic.Type}
	}
	return s
}

// Payloads lists the payload files in dir (one partner's directory), without
// sidecars and temporary files, sorted.
func Payloads(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || strings.HasPrefix(n, ".") || strings.HasSuffix(n, SidecarSuffix) {
			continue
		}
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// FileName is the name payload i of m gets (see the package comment). It
// does not depend on the payload's position, which shifts when business
// dedup leaves out payloads of interchanges accepted before; a repeated run
// for the same message therefore always finds its own files.
func FileName(m *exchange.Message, i int) string {
	var prefix string
	if id := sanitizeID(m.MessageID, maxIDLen); id != "" {
		prefix = id
	} else {
		prefix = "message"
	}
	if ic, ok := m.PayloadInterchange(i); ok {
		if ref := sanitizeID(ic.Reference, maxRefLen); ref != "" {
			prefix += "_" + ref
		}
	}
	return prefix + "-" + keyed(m, i, sanitize)
}

// LegacyFileName is the name earlier versions gave payload i of m (key16,
// sha12 and the file name as they sanitised it); a payload found under it
// is not written again.
func LegacyFileName(m *exchange.Message, i int) string {
	return keyed(m, i, legacySanitize)
}

func keyed(m *exchange.Message, i int, clean func(string) string) string {
	p := m.Payloads[i]
	base := p.Filename
	if base == "" {
		base = p.ContentID
	}
	base = clean(base)
	if base == "" {
		base = "payload" + extension(p.ContentType)
	}
	return fmt.Sprintf("%s-%s-%s", string(m.TransportKey)[:min(16, len(m.TransportKey))], p.SHA256[:min(12, len(p.SHA256))], base)
}

// legacySanitize is the file name sanitiser of earlier versions, kept
// unchanged for LegacyFileName.
func legacySanitize(s string) string {
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

// safeRune reports whether r may appear in a file name: ASCII letters,
// digits and . _ - @ + (portable, no shell or path meaning).
func safeRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
		r == '.' || r == '-' || r == '_' || r == '@' || r == '+'
}

// sanitize keeps a sender's file name safe: no directories, no dot files, a
// limited character set and length (the end, with the extension, is kept),
// never the sidecar suffix.
func sanitize(s string) string {
	s = filepath.Base(strings.ReplaceAll(s, "\\", "/"))
	if s == "/" || s == "." {
		return ""
	}
	out := strings.TrimLeft(mapSafe(s), ".")
	if len(out) > maxBaseLen {
		out = strings.TrimLeft(out[len(out)-maxBaseLen:], ".")
	}
	if strings.HasSuffix(out, SidecarSuffix) {
		out = strings.TrimSuffix(out, SidecarSuffix) + "_meta.json"
	}
	return out
}

// sanitizeID makes a message id or reference a file name part: safe
// characters only (every other character, or invalid byte, becomes _), no
// leading dot (hidden file), - or + (taken for an option by rm * and
// other tools), at most n bytes (the start is kept).
func sanitizeID(s string, n int) string {
	out := strings.TrimLeft(mapSafe(s), ".-+")
	if len(out) > n {
		out = out[:n]
	}
	return out
}

func mapSafe(s string) string {
	var b strings.Builder
	for _, r := range s {
		if safeRune(r) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// staged is content written to a synced file in dir that does not have its
// final name yet: a file without a name (openUnnamed), or where there is
// none a temporary file. link then gives it the name, which fails instead
// of replacing an existing file, so the name appears only for complete,
// synced content.
type staged struct {
	dir, name string
	p         exchange.Payload
	f         *os.File // the file without a name, open until linked
	tmp       string   // or the temporary file's name
	sum       string   // SHA-256 of the content
}

// stage writes p to a synced file in dir that is not visible under name yet.
func stage(dir, name string, p exchange.Payload) (*staged, error) {
	s := &staged{dir: dir, name: name, p: p}
	f, err := openUnnamed(dir)
	if err != nil {
		return nil, err
	}
	if f == nil {
		if err := s.stageNamed(); err != nil {
			return nil, err
		}
		return s, nil
	}
	if s.sum, err = writeSynced(f, p); err != nil {
		f.Close()
		return nil, err
	}
	s.f = f
	return s, nil
}

// stageNamed writes the content through a temporary file instead.
func (s *staged) stageNamed() error {
	tmp, err := os.CreateTemp(s.dir, ".tmp-"+s.name[:min(len(s.name), 32)]+"-*")
	if err != nil {
		return err
	}
	sum, err := writeSynced(tmp, s.p)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		return err
	}
	s.tmp, s.sum = tmp.Name(), sum
	return nil
}

// link gives the staged file its name and releases it. An existing file
// under the name is this message's own earlier write when it has the same
// content; with keep, one with other content is left as it is (a sidecar
// from an earlier run, whose received time differs); else it is refused.
func (s *staged) link(keep bool) error {
	defer s.discard()
	final := filepath.Join(s.dir, s.name)
	if s.f != nil {
		err := linkUnnamed(s.f, final)
		cerr := s.f.Close()
		s.f = nil
		if !errors.Is(err, errNoLink) {
			if err == nil {
				err = cerr
			}
			return settle(final, s.sum, err, keep)
		}
		// No way to name it here: write it again through a named file.
		if err := s.stageNamed(); err != nil {
			return err
		}
	}
	return settle(final, s.sum, os.Link(s.tmp, final), keep)
}

// discard closes or removes what is left of a staged file (nothing after
// link). It may be called on nil.
func (s *staged) discard() {
	if s == nil {
		return
	}
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
	if s.tmp != "" {
		os.Remove(s.tmp)
		s.tmp = ""
	}
}

// syncFile syncs a written file (tests observe it).
var syncFile = (*os.File).Sync

// errNoLink is linkUnnamed's error where a file without a name cannot be
// given one.
var errNoLink = errors.New("inbox: a file without a name cannot be linked here")

// unnamedOff is set once linkUnnamed found it cannot work in this process.
var unnamedOff atomic.Bool

// writeSynced copies p to f and syncs it; it returns the SHA-256 of what it
// wrote.
func writeSynced(f *os.File, p exchange.Payload) (string, error) {
	r, err := p.Open()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), r)
	r.Close()
	if err == nil {
		err = syncFile(f)
	}
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// settle judges the link of content with SHA-256 sum to final: linkErr nil
// is success; an existing final is success when it holds the same content
// (or anything, with keep), else refused.
func settle(final, sum string, linkErr error, keep bool) error {
	if linkErr == nil {
		return nil
	}
	if !errors.Is(linkErr, os.ErrExist) {
		return linkErr
	}
	if keep {
		return nil
	}
	same, err := sameContent(final, sum)
	if err != nil {
		return err
	}
	if !same {
		return fmt.Errorf("%s exists with other content; refusing to overwrite", final)
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

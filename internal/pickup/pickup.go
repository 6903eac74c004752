// Package pickup queues the files operators drop into pickup directories:
// <root>/<partner>/ for a partner that sends with one protocol,
// <root>/<partner>/as2/ and <root>/<partner>/as4/ for one that sends with
// both. A file renamed into such a directory (written first under a name
// starting with "." or ending ".tmp" or ".part", which are ignored) is
// submitted once (Source "pickup", an idempotency key derived from its
// name, size, modification time and SHA-256) and moved to
// .queued/<id>--<name>; once its message is final it is moved to
// sent/<name> or failed/<name>, with the MDN or receipt beside it
// (<name>.mdn, <name>.receipt.xml, <name>.error.xml) and, for failed,
// <name>.reason.txt.
//
// A payload <name> in an AS4 pickup directory may have a sidecar, the
// hidden file .<name>.properties beside it (written before the payload is
// renamed in): its NAME=VALUE lines are the message's AS4 part properties
// (parseSidecar), part of the key too. The sidecar moves with its payload:
// to .queued/.<id>--<name>.properties, then beside it as
// sent/<name>.properties or failed/<name>.properties. A payload whose
// sidecar cannot be used, or that has one in an AS2 directory, goes to
// failed/ at once. A sidecar without its payload is left alone (its
// payload may be on its way).
//
// A crash between the submission and the move is harmless: the next scan
// derives the same key and the queue returns the message queued first.
// The sidecar is moved before its payload; a crash in between leaves it
// in .queued/ without its payload, where the next scan finds it for the
// payload still waiting (same properties, same key). The same name
// dropped again later has another modification time, hence another key:
// a new message.
//
// File events (fsnotify) start a scan at once; a scan also runs every
// Interval, since events get lost (overflow, network file systems). The
// directories must be on one node's disk: in a fleet, run the pickup on
// one node only.
package pickup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/edigateway/gateway/outbound"
)

// Submitter queues a submission (outbound.Queue in the gateway).
type Submitter interface {
	Submit(ctx context.Context, s outbound.Submission) (outbound.Message, bool, error)
}

// Target is a partner that sends, with the protocols it sends with.
type Target struct {
	Partner   string
	Protocols []outbound.Protocol
	// FilenameProperty is the partner's as4.send.filename_property: the
	// part property that carries the file name, which a sidecar may not
	// give (empty: none).
	FilenameProperty string
}

// Config configures a Watcher.
type Config struct {
	// Dir is the root of the pickup directories.
	Dir string
	// Interval between two scans (default 2s).
	Interval time.Duration
	// Targets lists the partners that send (called at every scan, so a
	// reloaded partner directory is followed).
	Targets   func() []Target
	Submitter Submitter
	// Store is asked for the outcome of the queued files.
	Store outbound.Store
	// MaxPayload bounds a file (0: no bound); a larger one goes to
	// failed/ at once.
	MaxPayload int64
	Log        *slog.Logger
}

// Directories under a pickup directory.
const (
	QueuedDir = ".queued"
	SentDir   = "sent"
	FailedDir = "failed"
)

// maxWarned bounds the memory of failures logged.
const maxWarned = 10000

// Watcher watches the pickup directories. Scan and Run are not to be
// called concurrently.
type Watcher struct {
	cfg Config
	// rename moves files (os.Rename; tests make it fail to stand for a
	// crash).
	rename func(oldpath, newpath string) error
	// warned remembers files whose failure was logged, so that a file
	// that keeps failing is logged once per version.
	warned map[string]bool
	watch  *fsnotify.Watcher
	// watched are the directories watched for events.
	watched map[string]bool
}

// New returns a Watcher of cfg.Dir.
func New(cfg Config) (*Watcher, error) {
	if cfg.Dir == "" || cfg.Submitter == nil || cfg.Store == nil || cfg.Targets == nil {
		return nil, errors.New("pickup: Dir, Targets, Submitter and Store are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 2 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Watcher{cfg: cfg, rename: os.Rename, warned: map[string]bool{}, watched: map[string]bool{}}, nil
}

// FileKey is the idempotency key of a file: its name (relative to its
// pickup directory's partner directory), size, modification time (ns),
// SHA-256 (hex) and the part properties of its sidecar, in their order
// (none: the key of a file without a sidecar, as before sidecars). The
// same file found again after a crash has the same key; the same name
// written again later has another, and so has the same file with another
// sidecar.
func FileKey(name string, size int64, mtime time.Time, sum string, props ...outbound.Property) string {
	b := fmt.Appendf(nil, "%s\x00%d\x00%d\x00%s", name, size, mtime.UnixNano(), sum)
	for _, p := range props {
		b = fmt.Appendf(b, "\x00%d:%s%d:%s", len(p.Name), p.Name, len(p.Value), p.Value)
	}
	h := sha256.Sum256(b)
	return "file-" + hex.EncodeToString(h[:16])
}

// Ignored reports whether a name in a pickup directory is a file still
// being written (".name", "name.tmp", "name.part").
func Ignored(name string) bool {
	return strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".tmp") || strings.HasSuffix(name, ".part")
}

// dir is one pickup directory.
type dir struct {
	path, partner string
	protocol      outbound.Protocol
	// prefix is the protocol's subdirectory ("as2/") for a partner that
	// sends with both, in the files' keys.
	prefix string
	// filenameProperty is the partner's as4.send.filename_property.
	filenameProperty string
}

// dirs lists the pickup directories of the targets.
func (w *Watcher) dirs() []dir {
	var out []dir
	for _, t := range w.cfg.Targets() {
		if t.Partner == "" || t.Partner == ".." || strings.ContainsAny(t.Partner, `/\`) || strings.HasPrefix(t.Partner, ".") {
			w.warnOnce("partner:"+t.Partner, "pickup: partner id cannot name a directory; no pickup for it", "partner", t.Partner)
			continue
		}
		base := filepath.Join(w.cfg.Dir, t.Partner)
		switch len(t.Protocols) {
		case 0:
		case 1:
			out = append(out, dir{path: base, partner: t.Partner, protocol: t.Protocols[0], filenameProperty: t.FilenameProperty})
		default:
			for _, p := range t.Protocols {
				out = append(out, dir{path: filepath.Join(base, string(p)), partner: t.Partner, protocol: p, prefix: string(p) + "/",
					filenameProperty: t.FilenameProperty})
			}
		}
	}
	return out
}

func (w *Watcher) warnOnce(key, msg string, args ...any) {
	if w.warned[key] {
		return
	}
	if len(w.warned) >= maxWarned {
		clear(w.warned) // bounded: a failure is logged again after this many others
	}
	w.warned[key] = true
	w.cfg.Log.Warn(msg, args...)
}

// Run creates the directories, then scans them on file events and every
// Interval until ctx is done.
func (w *Watcher) Run(ctx context.Context) error {
	if err := os.MkdirAll(w.cfg.Dir, 0o750); err != nil {
		return fmt.Errorf("pickup: %w", err)
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	if fw, err := fsnotify.NewWatcher(); err != nil {
		w.cfg.Log.Warn("pickup: no file events, scanning every interval only", "error", err, "interval", w.cfg.Interval)
	} else {
		w.watch = fw
		defer fw.Close()
		events, errs = fw.Events, fw.Errors
	}
	w.cfg.Log.Info("pickup: watching", "dir", w.cfg.Dir, "interval", w.cfg.Interval)
	tick := time.NewTicker(w.cfg.Interval)
	defer tick.Stop()
	for {
		w.Scan(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case ev := <-events:
			w.cfg.Log.Debug("pickup: file event", "event", ev.String())
		case err := <-errs:
			w.cfg.Log.Warn("pickup: file events lost, the next scan finds the files", "error", err)
		}
	}
}

// Scan makes one pass: it creates missing directories, submits the files
// dropped and moves the queued files whose message is final.
func (w *Watcher) Scan(ctx context.Context) {
	for _, d := range w.dirs() {
		if ctx.Err() != nil {
			return
		}
		if err := os.MkdirAll(d.path, 0o750); err != nil {
			w.warnOnce("mkdir:"+d.path, "pickup: cannot create the partner's directory", "dir", d.path, "error", err)
			continue
		}
		if w.watch != nil && !w.watched[d.path] {
			if err := w.watch.Add(d.path); err != nil {
				w.warnOnce("watch:"+d.path, "pickup: no file events for the directory, scanned every interval", "dir", d.path, "error", err)
			} else {
				w.watched[d.path] = true
			}
		}
		w.submitAll(ctx, d)
		w.settleAll(ctx, d)
	}
}

// submitAll submits the files of d.
func (w *Watcher) submitAll(ctx context.Context, d dir) {
	entries, err := os.ReadDir(d.path)
	if err != nil {
		w.warnOnce("read:"+d.path, "pickup: cannot read the directory", "dir", d.path, "error", err)
		return
	}
	// The sidecars stranded in .queued/ by a crash, read once a scan and
	// only for a payload without a sidecar beside it.
	var stranded map[string]string
	strandedFor := func(name string) (string, error) {
		if stranded == nil {
			m, err := strandedSidecars(filepath.Join(d.path, QueuedDir))
			if err != nil {
				return "", err
			}
			stranded = m
		}
		return stranded[name], nil
	}
	for _, e := range entries {
		if ctx.Err() != nil {
			return
		}
		if !e.Type().IsRegular() || Ignored(e.Name()) {
			continue
		}
		if err := w.submit(ctx, d, e.Name(), strandedFor); err != nil {
			w.warnOnce("submit:"+filepath.Join(d.path, e.Name())+":"+err.Error(), "pickup: file not queued, tried again at the next scan",
				"partner", d.partner, "file", filepath.Join(d.path, e.Name()), "error", err)
		}
	}
}

// submit queues one file and moves it to .queued/, its sidecar first.
// stranded names the sidecar a crashed scan left in .queued/ for a
// payload name ("": none).
func (w *Watcher) submit(ctx context.Context, d dir, name string, stranded func(name string) (string, error)) error {
	path := filepath.Join(d.path, name)
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	sc, err := w.findSidecar(d, name, stranded)
	if err != nil {
		return err
	}
	// A payload refused for itself takes its sidecar along first (a crash
	// in between refuses it again); one refused for its sidecar goes first,
	// so that a crash in between leaves the sidecar, which refuses it again,
	// not a payload without it that would be sent without its properties.
	switch {
	case fi.Size() == 0:
		return w.refuse(d, name, "the file is empty", sc, false)
	case w.cfg.MaxPayload > 0 && fi.Size() > w.cfg.MaxPayload:
		return w.refuse(d, name, fmt.Sprintf("the file has %d bytes, more than outbound.max_payload_bytes %d", fi.Size(), w.cfg.MaxPayload), sc, false)
	case sc != "" && d.protocol != outbound.AS4:
		return w.refuse(d, name, fmt.Sprintf("the sidecar %s gives AS4 part properties; the directory is %s, which has none",
			filepath.Base(sc), d.protocol), sc, true)
	}
	var props []outbound.Property
	if sc != "" {
		if props, err = readSidecar(sc, d.filenameProperty); err != nil {
			return w.refuse(d, name, fmt.Sprintf("the sidecar %s: %v", filepath.Base(sc), err), sc, true)
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("reading: %w", err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("seek: %w", err)
	}
	key := FileKey(d.prefix+name, fi.Size(), fi.ModTime(), sum, props...)
	m, created, err := w.cfg.Submitter.Submit(ctx, outbound.Submission{Partner: d.partner, Protocol: d.protocol,
		IdempotencyKey: key, Payload: io.LimitReader(f, fi.Size()), Filename: name, Source: "pickup", Properties: props})
	if err != nil {
		return fmt.Errorf("submitting: %w", err)
	}
	if created && m.SHA256 != sum {
		w.cfg.Log.Warn("pickup: the file changed while it was queued (write it under a .tmp name, then rename it in)",
			"file", path, "id", m.ID, "hashed", sum, "queued", m.SHA256)
	}
	if err := os.MkdirAll(filepath.Join(d.path, QueuedDir), 0o750); err != nil {
		return fmt.Errorf("creating %s: %w", QueuedDir, err)
	}
	if sc != "" {
		if q := filepath.Join(d.path, QueuedDir, queuedSidecarName(m.ID, name)); sc != q {
			if err := w.rename(sc, q); err != nil {
				return fmt.Errorf("queued as %s, moving the sidecar %s to %s: %w", m.ID, filepath.Base(sc), QueuedDir, err)
			}
		}
	}
	if err := w.rename(path, filepath.Join(d.path, QueuedDir, m.ID+"--"+name)); err != nil {
		return fmt.Errorf("queued as %s, moving to %s: %w", m.ID, QueuedDir, err)
	}
	names := make([]string, len(props))
	for i, p := range props {
		names[i] = p.Name
	}
	w.cfg.Log.Info("pickup: file queued", "partner", d.partner, "protocol", m.Protocol, "file", path, "id", m.ID,
		"message_id", m.MessageID, "new", created, "size", fi.Size(), "properties", names)
	return nil
}

// findSidecar returns the path of the sidecar of payload name in d ("":
// none): .<name>.properties beside it, else, in an AS4 directory, the one
// a crashed scan moved to .queued/ before the payload.
func (w *Watcher) findSidecar(d dir, name string, stranded func(string) (string, error)) (string, error) {
	beside := filepath.Join(d.path, SidecarName(name))
	if _, err := os.Lstat(beside); !errors.Is(err, os.ErrNotExist) {
		return beside, nil // an error other than "none" is the sidecar's: refused when read
	}
	if d.protocol != outbound.AS4 {
		return "", nil
	}
	p, err := stranded(name)
	if err != nil {
		return "", fmt.Errorf("looking for a sidecar moved to %s: %w", QueuedDir, err)
	}
	return p, nil
}

// refuse moves a file that cannot be queued to failed/ with the reason,
// and its sidecar (when sidecar is not "") beside it, after the file when
// sidecarLast.
func (w *Watcher) refuse(d dir, name, reason, sidecar string, sidecarLast bool) error {
	w.cfg.Log.Warn("pickup: file refused", "partner", d.partner, "file", filepath.Join(d.path, name), "reason", reason)
	return w.finish(d, filepath.Join(d.path, name), name, FailedDir, reason+"\n", nil, sidecar, sidecarLast)
}

// settleAll moves the queued files of d whose message is final.
func (w *Watcher) settleAll(ctx context.Context, d dir) {
	qdir := filepath.Join(d.path, QueuedDir)
	entries, err := os.ReadDir(qdir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			w.warnOnce("read:"+qdir, "pickup: cannot read the directory", "dir", qdir, "error", err)
		}
		return
	}
	for _, e := range entries {
		if ctx.Err() != nil {
			return
		}
		id, name, ok := strings.Cut(e.Name(), "--")
		if !ok || !e.Type().IsRegular() || name == "" || strings.HasPrefix(e.Name(), ".") { // .<id>--<name>.properties: a sidecar
			continue
		}
		if err := w.settle(ctx, d, filepath.Join(qdir, e.Name()), id, name); err != nil {
			w.warnOnce("settle:"+e.Name()+":"+err.Error(), "pickup: queued file not moved, tried again at the next scan",
				"partner", d.partner, "file", filepath.Join(qdir, e.Name()), "error", err)
		}
	}
}

// settle moves one queued file once its message is final, its sidecar
// first (a crash in between moves the file at the next scan; the other
// way round would leave the sidecar in .queued/ without its payload, as a
// crash in submit does).
func (w *Watcher) settle(ctx context.Context, d dir, path, id, name string) error {
	sc := filepath.Join(filepath.Dir(path), queuedSidecarName(id, name))
	if _, err := os.Lstat(sc); err != nil {
		sc = ""
	}
	m, err := w.cfg.Store.Get(ctx, id)
	switch {
	case errors.Is(err, outbound.ErrNotFound):
		return w.finish(d, path, name, FailedDir, fmt.Sprintf("the queue has no message %s (a memory: store forgets its queue on restart)\n", id), nil, sc, false)
	case err != nil:
		return fmt.Errorf("looking up message %s: %w", id, err)
	case !m.State.Final():
		return nil
	case m.State == outbound.Delivered:
		w.cfg.Log.Info("pickup: file delivered", "partner", d.partner, "file", name, "id", id)
		return w.finish(d, path, name, SentDir, "", m.Evidence, sc, false)
	}
	reason := fmt.Sprintf("%s: %s\nmessage %s (%s), %d attempts\n", m.State, m.Reason, m.ID, m.MessageID, m.Attempts)
	if m.LastError != "" && m.LastError != m.Reason {
		reason += "last error: " + m.LastError + "\n"
	}
	w.cfg.Log.Info("pickup: file not delivered", "partner", d.partner, "file", name, "id", id, "state", m.State, "reason", m.Reason)
	return w.finish(d, path, name, FailedDir, reason, m.Evidence, sc, false)
}

// evidenceSuffix names a file of evidence by its kind.
func evidenceSuffix(kind string) string {
	switch kind {
	case "mdn":
		return ".mdn"
	case "receipt":
		return ".receipt.xml"
	case "error":
		return ".error.xml"
	}
	return ".evidence"
}

// finish moves path to sub/<name> of d (another name when taken), with
// the evidence and the reason beside it, and its sidecar (when sidecar is
// not "") as <name>.properties. The evidence is written first and the
// file moved last: a crash in between writes them again. The sidecar is
// moved before the file, or right after it when sidecarLast.
func (w *Watcher) finish(d dir, path, name, sub, reason string, ev *outbound.Evidence, sidecar string, sidecarLast bool) error {
	dest := filepath.Join(d.path, sub)
	if err := os.MkdirAll(dest, 0o750); err != nil {
		return fmt.Errorf("creating %s: %w", sub, err)
	}
	target := free(dest, name)
	if ev != nil {
		if err := os.WriteFile(filepath.Join(dest, target+evidenceSuffix(ev.Kind)), ev.Body, 0o640); err != nil {
			return fmt.Errorf("writing the evidence: %w", err)
		}
	}
	if reason != "" {
		if err := os.WriteFile(filepath.Join(dest, target+".reason.txt"), []byte(reason), 0o640); err != nil {
			return fmt.Errorf("writing the reason: %w", err)
		}
	}
	moveSidecar := func() error {
		if sidecar == "" {
			return nil
		}
		if err := w.rename(sidecar, filepath.Join(dest, target+sidecarSuffix)); err != nil {
			return fmt.Errorf("moving the sidecar %s to %s: %w", filepath.Base(sidecar), sub, err)
		}
		return nil
	}
	if !sidecarLast {
		if err := moveSidecar(); err != nil {
			return err
		}
	}
	if err := w.rename(path, filepath.Join(dest, target)); err != nil {
		return fmt.Errorf("moving to %s: %w", sub, err)
	}
	if sidecarLast {
		if err := moveSidecar(); err != nil {
			return fmt.Errorf("moved to %s, but: %w", sub, err)
		}
	}
	return nil
}

// free returns name, or name with a suffix (inv.edi → inv.1.edi, inv.2.edi
// …) when dir holds a file of that name.
func free(dir, name string) string {
	if _, err := os.Lstat(filepath.Join(dir, name)); errors.Is(err, os.ErrNotExist) {
		return name
	}
	ext := filepath.Ext(name)
	stem := strings.TrimSuffix(name, ext)
	for i := 1; ; i++ {
		n := fmt.Sprintf("%s.%d%s", stem, i, ext)
		if _, err := os.Lstat(filepath.Join(dir, n)); errors.Is(err, os.ErrNotExist) {
			return n
		}
	}
}

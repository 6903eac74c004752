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
// payload still waiting: used only if its message <id> has the key the
// payload gets with it (same file, same properties), so that another file
// of that name dropped instead does not get it; one whose message the
// queue does not know refuses the waiting file (cannot tell). A sidecar
// left in .queued/ without its payload and not used is filed alone
// (sent/ or failed/<name>.properties, with the evidence and reason) once
// its message is final and no file of its name waits. The same name
// dropped again later has another modification time, hence another key:
// a new message.
//
// A file is filed under a name (<name>, else <name>.1 …) for which neither
// it nor any file it writes beside it is taken, so that an archived
// a.properties is not replaced by the sidecar of a.
//
// File events (fsnotify) start a scan at once; a scan also runs every
// Interval, since events get lost (overflow, network file systems). The
// directories must be on one node's disk: in a fleet, run the pickup on
// one node only.
package pickup

import (
	"bytes"
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
	var stranded map[string][]queuedSidecar
	strandedFor := func(name string) ([]queuedSidecar, error) {
		if stranded == nil {
			m, err := strandedSidecars(filepath.Join(d.path, QueuedDir))
			if err != nil {
				return nil, err
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
// stranded lists the sidecars left in .queued/ without their payload for
// a payload name.
func (w *Watcher) submit(ctx context.Context, d dir, name string, stranded func(name string) ([]queuedSidecar, error)) error {
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
	// The sidecar beside the payload; one stranded in .queued/ is looked
	// for below, once the key it would give is known.
	sc := filepath.Join(d.path, SidecarName(name))
	if _, err := os.Lstat(sc); errors.Is(err, os.ErrNotExist) {
		sc = "" // an error other than "none" is the sidecar's: refused when read
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
	if sc == "" && d.protocol == outbound.AS4 {
		cands, err := stranded(name)
		if err != nil {
			return fmt.Errorf("looking for a sidecar moved to %s: %w", QueuedDir, err)
		}
		var unsure *queuedSidecar
		if sc, props, unsure, err = w.strandedSidecar(ctx, d, name, fi, sum, cands); err != nil {
			return err
		}
		if unsure != nil {
			return w.refuse(d, name, fmt.Sprintf("the sidecar %s was left in %s by a stop and the queue has no message %s "+
				"(a memory: store forgets its queue on restart), so whether it is this file's cannot be told; "+
				"drop the file again, with its sidecar if it has one", filepath.Base(unsure.path), QueuedDir, unsure.id),
				unsure.path, true)
		}
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

// strandedSidecar returns the sidecar a stopped scan left in .queued/
// for payload name, with its properties: the one whose message has the
// key the payload gets with them (the stop fell between the sidecar's move
// and the payload's). Another file of that name dropped later has another
// key: it gets none of them, and they are filed when their messages are
// final (settleAll). unsure is one whose message the queue does not know
// or that cannot be read any more (nothing to compare), when none
// matched: the payload is refused with it rather than sent with or
// without properties that may not be its own.
func (w *Watcher) strandedSidecar(ctx context.Context, d dir, name string, fi os.FileInfo, sum string, cands []queuedSidecar) (
	sc string, props []outbound.Property, unsure *queuedSidecar, err error) {
	for i, c := range cands {
		ps, err := readSidecar(c.path, d.filenameProperty)
		if err != nil {
			if unsure == nil {
				unsure = &cands[i]
			}
			continue
		}
		m, err := w.cfg.Store.Get(ctx, c.id)
		switch {
		case errors.Is(err, outbound.ErrNotFound):
			if unsure == nil {
				unsure = &cands[i]
			}
			continue
		case err != nil:
			return "", nil, nil, fmt.Errorf("looking up message %s of the sidecar %s in %s: %w", c.id, filepath.Base(c.path), QueuedDir, err)
		}
		if m.Partner == d.partner && m.IdempotencyKey == FileKey(d.prefix+name, fi.Size(), fi.ModTime(), sum, ps...) {
			return c.path, ps, nil, nil
		}
		w.warnOnce("stranded:"+c.path+":"+filepath.Join(d.path, name)+":"+fi.ModTime().String(),
			"pickup: a sidecar left in .queued/ by a stop is not the waiting file's; the file is queued without it, the sidecar filed when its message is final",
			"partner", d.partner, "file", filepath.Join(d.path, name), "sidecar", c.path, "id", c.id)
	}
	return "", nil, unsure, nil
}

// refuse moves a file that cannot be queued to failed/ with the reason,
// and its sidecar (when sidecar is not "") beside it, after the file when
// sidecarLast.
func (w *Watcher) refuse(d dir, name, reason, sidecar string, sidecarLast bool) error {
	w.cfg.Log.Warn("pickup: file refused", "partner", d.partner, "file", filepath.Join(d.path, name), "reason", reason)
	return w.finish(d, filing{path: filepath.Join(d.path, name), name: name, sub: FailedDir, reason: reason + "\n",
		sidecar: sidecar, sidecarLast: sidecarLast})
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
	payloads := make(map[string]bool, len(entries))
	for _, e := range entries {
		payloads[e.Name()] = !strings.HasPrefix(e.Name(), ".")
	}
	for _, e := range entries {
		if ctx.Err() != nil {
			return
		}
		if !e.Type().IsRegular() {
			continue
		}
		path, sc := filepath.Join(qdir, e.Name()), ""
		id, name, ok := parseQueuedSidecar(e.Name())
		if ok {
			// A sidecar: settled with its payload when that is here; else
			// an orphan, filed alone, unless a file of its name waits in the
			// directory (it may be that file's, whose move failed: submit
			// decides at the next scan).
			if payloads[id+"--"+name] {
				continue
			}
			if _, err := os.Lstat(filepath.Join(d.path, name)); !errors.Is(err, os.ErrNotExist) {
				continue
			}
			path, sc = "", path
		} else {
			if id, name, ok = strings.Cut(e.Name(), "--"); !ok || name == "" || strings.HasPrefix(e.Name(), ".") {
				continue
			}
			if q := filepath.Join(qdir, queuedSidecarName(id, name)); lexists(q) {
				sc = q
			}
		}
		if err := w.settle(ctx, d, path, sc, id, name); err != nil {
			w.warnOnce("settle:"+e.Name()+":"+err.Error(), "pickup: queued file not moved, tried again at the next scan",
				"partner", d.partner, "file", filepath.Join(qdir, e.Name()), "error", err)
		}
	}
}

// settle moves one queued file once its message is final, its sidecar sc
// ("": none) first (a crash in between moves the file at the next scan;
// the other way round would leave the sidecar in .queued/ without its
// payload, as a crash in submit does). An empty path is a sidecar without
// its payload (an orphan): filed alone, as <name>.properties with the
// evidence and reason its payload would have got.
func (w *Watcher) settle(ctx context.Context, d dir, path, sc, id, name string) error {
	m, err := w.cfg.Store.Get(ctx, id)
	switch {
	case errors.Is(err, outbound.ErrNotFound):
		return w.finish(d, filing{path: path, name: name, sub: FailedDir,
			reason: fmt.Sprintf("the queue has no message %s (a memory: store forgets its queue on restart)\n", id), sidecar: sc})
	case err != nil:
		return fmt.Errorf("looking up message %s: %w", id, err)
	case !m.State.Final():
		return nil
	}
	if path == "" {
		w.cfg.Log.Warn("pickup: sidecar filed without its payload (the payload queued with it was removed or replaced after a stop)",
			"partner", d.partner, "file", name, "id", id, "state", m.State)
	}
	// A payload without a sidecar must not land beside another file's
	// <name>.properties; one whose sidecar is gone from .queued/ has it
	// in sent/ or failed/ already (a stop between the two moves).
	bare := path != "" && sc == "" && len(m.Properties) == 0
	if m.State == outbound.Delivered {
		if path != "" {
			w.cfg.Log.Info("pickup: file delivered", "partner", d.partner, "file", name, "id", id)
		}
		return w.finish(d, filing{path: path, name: name, sub: SentDir, ev: m.Evidence, sidecar: sc, bare: bare})
	}
	reason := fmt.Sprintf("%s: %s\nmessage %s (%s), %d attempts\n", m.State, m.Reason, m.ID, m.MessageID, m.Attempts)
	if m.LastError != "" && m.LastError != m.Reason {
		reason += "last error: " + m.LastError + "\n"
	}
	if path != "" {
		w.cfg.Log.Info("pickup: file not delivered", "partner", d.partner, "file", name, "id", id, "state", m.State, "reason", m.Reason)
	}
	return w.finish(d, filing{path: path, name: name, sub: FailedDir, reason: reason, ev: m.Evidence, sidecar: sc, bare: bare})
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

// filing is what finish moves to sent/ or failed/.
type filing struct {
	// path is the payload ("": none, a sidecar filed alone), name the
	// name it is filed under in sub (SentDir, FailedDir).
	path, name, sub string
	// reason is written to <name>.reason.txt ("": none), ev beside it
	// (nil: none).
	reason string
	ev     *outbound.Evidence
	// sidecar ("": none) is moved to <name>.properties, before the
	// payload, or right after it when sidecarLast.
	sidecar     string
	sidecarLast bool
	// bare: the payload has no sidecar, so no <name>.properties may be
	// beside it either.
	bare bool
}

// finish moves f.path to f.sub/<name> of d (another name when that name or
// a name it writes beside it is taken: free), with the evidence and the
// reason beside it, and its sidecar as <name>.properties. The evidence is
// written first and the file moved last: a crash in between writes them
// again, under the same name.
func (w *Watcher) finish(d dir, f filing) error {
	dest := filepath.Join(d.path, f.sub)
	if err := os.MkdirAll(dest, 0o750); err != nil {
		return fmt.Errorf("creating %s: %w", f.sub, err)
	}
	var written []companion
	if f.ev != nil {
		written = append(written, companion{suffix: evidenceSuffix(f.ev.Kind), body: f.ev.Body})
	}
	if f.reason != "" {
		written = append(written, companion{suffix: ".reason.txt", body: []byte(f.reason)})
	}
	var absent []string
	if f.sidecar != "" || f.bare {
		absent = append(absent, sidecarSuffix)
	}
	target := free(dest, f.name, written, absent)
	for _, c := range written {
		if err := os.WriteFile(filepath.Join(dest, target+c.suffix), c.body, 0o640); err != nil {
			return fmt.Errorf("writing %s: %w", target+c.suffix, err)
		}
	}
	moveSidecar := func() error {
		if f.sidecar == "" {
			return nil
		}
		if err := w.rename(f.sidecar, filepath.Join(dest, target+sidecarSuffix)); err != nil {
			return fmt.Errorf("moving the sidecar %s to %s: %w", filepath.Base(f.sidecar), f.sub, err)
		}
		return nil
	}
	if !f.sidecarLast || f.path == "" {
		if err := moveSidecar(); err != nil {
			return err
		}
	}
	if f.path == "" {
		return nil
	}
	if err := w.rename(f.path, filepath.Join(dest, target)); err != nil {
		return fmt.Errorf("moving to %s: %w", f.sub, err)
	}
	if f.sidecarLast {
		if err := moveSidecar(); err != nil {
			return fmt.Errorf("moved to %s, but: %w", f.sub, err)
		}
	}
	return nil
}

// companion is a file finish writes beside a payload: <name><suffix>.
type companion struct {
	suffix string
	body   []byte
}

// free returns name, or name with a suffix (inv.edi → inv.1.edi, inv.2.edi
// …), such that dir holds no file of that name, none of that name with
// one of the suffixes absent, and none with the suffix of one of the
// companions written, unless that one holds the very bytes (written by a
// stopped attempt to file the same message: written again, not under
// another name).
func free(dir, name string, written []companion, absent []string) string {
	isFree := func(n string) bool {
		if _, err := os.Lstat(filepath.Join(dir, n)); !errors.Is(err, os.ErrNotExist) {
			return false
		}
		for _, s := range absent {
			if _, err := os.Lstat(filepath.Join(dir, n+s)); !errors.Is(err, os.ErrNotExist) {
				return false
			}
		}
		for _, c := range written {
			if !freeOrSame(filepath.Join(dir, n+c.suffix), c.body) {
				return false
			}
		}
		return true
	}
	if isFree(name) {
		return name
	}
	ext := filepath.Ext(name)
	stem := strings.TrimSuffix(name, ext)
	for i := 1; ; i++ {
		if n := fmt.Sprintf("%s.%d%s", stem, i, ext); isFree(n) {
			return n
		}
	}
}

// lexists reports whether path names a file (a link itself).
func lexists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// freeOrSame reports whether path does not exist or is a regular file
// holding body.
func freeOrSame(path string, body []byte) bool {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return true
	case err != nil || !fi.Mode().IsRegular() || fi.Size() != int64(len(body)):
		return false
	}
	b, err := os.ReadFile(path)
	return err == nil && bytes.Equal(b, body)
}

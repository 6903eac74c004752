package pickup

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/edigateway/gateway/outbound"
)

// MaxSidecarSize bounds a sidecar file: a larger one is refused without
// being read.
const MaxSidecarSize = 64 << 10

// sidecarSuffix ends the name of a payload's sidecar: .<name>.properties
// beside the payload, <name>.properties beside it in sent/ and failed/.
const sidecarSuffix = ".properties"

// SidecarName is the name of the sidecar of the payload name: the AS4
// part properties of the payload, written by the operator before the
// payload is renamed into place (its leading "." keeps the scanner from
// taking it for a payload).
func SidecarName(name string) string { return "." + name + sidecarSuffix }

// SidecarError says which line of a sidecar breaks which rule (Line 0:
// the file as a whole).
type SidecarError struct {
	Line int
	Err  error
}

func (e *SidecarError) Error() string {
	if e.Line == 0 {
		return e.Err.Error()
	}
	return fmt.Sprintf("line %d: %v", e.Line, e.Err)
}

func (e *SidecarError) Unwrap() error { return e.Err }

// utf8BOM is what some Windows editors write at the start of a UTF-8 file.
var utf8BOM = []byte("\xef\xbb\xbf")

// parseSidecar reads a sidecar: UTF-8 text (a leading byte order mark is
// skipped), one NAME=VALUE per line, split at the first "=". Blank lines
// and lines whose first non-blank character is "#" are skipped; a trailing
// "\r" is stripped; spaces and tabs around NAME are trimmed, VALUE is kept
// as written after the "=". The properties are in the order of their
// lines and pass outbound.ValidateProperties; none may be named
// filenameProperty (the partner's as4.send.filename_property, which
// carries the file name; compared without case). The first line that
// breaks a rule is returned as a *SidecarError.
func parseSidecar(b []byte, filenameProperty string) ([]outbound.Property, error) {
	b = bytes.TrimPrefix(b, utf8BOM)
	var ps []outbound.Property
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if rest := strings.TrimLeft(line, " \t"); rest == "" || rest[0] == '#' {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			return nil, &SidecarError{Line: i + 1, Err: errors.New(`no "=" (want NAME=VALUE)`)}
		}
		p := outbound.Property{Name: strings.Trim(name, " \t"), Value: value}
		ps = append(ps, p)
		// The queue's own rules, checked as each line is added, so that the
		// error names the line that breaks one (there are at most
		// outbound.MaxProperties+1 to check).
		if err := outbound.ValidateProperties(ps); err != nil {
			return nil, &SidecarError{Line: i + 1, Err: err}
		}
		if filenameProperty != "" && strings.EqualFold(p.Name, filenameProperty) {
			return nil, &SidecarError{Line: i + 1, Err: fmt.Errorf(
				"property %q is the one the partner's as4.send.filename_property writes the file name in", p.Name)}
		}
	}
	return ps, nil
}

// readSidecar reads the sidecar at path, a *SidecarError when it cannot
// be used (gone, not a regular file, unreadable, larger than
// MaxSidecarSize, or a line breaking a rule of parseSidecar).
func readSidecar(path, filenameProperty string) ([]outbound.Property, error) {
	fi, err := os.Lstat(path)
	switch {
	case err != nil:
		return nil, &SidecarError{Err: fmt.Errorf("cannot be read: %w", err)}
	case !fi.Mode().IsRegular():
		return nil, &SidecarError{Err: fmt.Errorf("is not a regular file (%s)", fi.Mode().Type())}
	case fi.Size() > MaxSidecarSize:
		return nil, &SidecarError{Err: fmt.Errorf("has %d bytes, more than %d", fi.Size(), MaxSidecarSize)}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, &SidecarError{Err: fmt.Errorf("cannot be read: %w", err)}
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSidecarSize+1))
	switch {
	case err != nil:
		return nil, &SidecarError{Err: fmt.Errorf("cannot be read: %w", err)}
	case len(b) > MaxSidecarSize:
		return nil, &SidecarError{Err: fmt.Errorf("has more than %d bytes", MaxSidecarSize)}
	}
	return parseSidecar(b, filenameProperty)
}

// queuedSidecarName is the name of the sidecar of message id's payload
// name in .queued/ (hidden, so that it is not settled as a payload).
func queuedSidecarName(id, name string) string { return "." + id + "--" + name + sidecarSuffix }

// queuedSidecar is a sidecar a stopped scan left in .queued/ without its
// payload: .<id>--<name>.properties.
type queuedSidecar struct {
	path, id string
}

// parseQueuedSidecar splits the name of a sidecar in .queued/ into the id
// of its message and the name of its payload (ok false: not one).
func parseQueuedSidecar(n string) (id, name string, ok bool) {
	rest, ok := strings.CutPrefix(n, ".")
	if !ok {
		return "", "", false
	}
	if rest, ok = strings.CutSuffix(rest, sidecarSuffix); !ok {
		return "", "", false
	}
	id, name, ok = strings.Cut(rest, "--")
	if !ok || id == "" || name == "" {
		return "", "", false
	}
	return id, name, true
}

// strandedSidecars lists, by payload name, the sidecars in qdir whose
// payload is not there: a scan moved the sidecar to .queued/ and stopped
// before moving its payload, or the payload it was moved for never
// followed (removed, or another sidecar beside it won). Newest id first
// (ids sort by time).
func strandedSidecars(qdir string) (map[string][]queuedSidecar, error) {
	entries, err := os.ReadDir(qdir)
	if errors.Is(err, os.ErrNotExist) {
		return map[string][]queuedSidecar{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", QueuedDir, err)
	}
	payloads := make(map[string]bool, len(entries))
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			payloads[e.Name()] = true
		}
	}
	out := map[string][]queuedSidecar{}
	for i := len(entries) - 1; i >= 0; i-- { // ReadDir sorts by name: newest id last
		n := entries[i].Name()
		id, name, ok := parseQueuedSidecar(n)
		if !ok || payloads[id+"--"+name] {
			continue
		}
		out[name] = append(out[name], queuedSidecar{path: filepath.Join(qdir, n), id: id})
	}
	return out, nil
}

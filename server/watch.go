package server

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// reloadDebounce is how long the watcher waits after the last file event
// before it reloads: editors and deployment tools write several events
// for one change (temporary file, rename, chmod, symlink swap).
var reloadDebounce = 500 * time.Millisecond

// startReloading logs the certificate findings of the first configuration
// and adds the background workers: the daily certificate check and, with
// reload_on_change, the file watcher.
func (s *Server) startReloading() {
	s.checkCurrentCertificates()
	files, _ := s.inputs()
	s.reload.fingerprint = fingerprint(files)
	s.background = append(s.background, s.runCertChecks(certCheckInterval))
	if s.Config.ReloadOnChange {
		s.background = append(s.background, s.watchFiles)
	}
}

// watchSet is what the watcher watches: directories, and for each the
// names in it that matter ("" = every name, for the partner directory).
type watchSet map[string]map[string]bool

// inputs lists the files a reload reads: the configuration file, the
// partner directory and its partner files, every partner certificate and our
// identity key and certificate files.
func (s *Server) inputs() (files []string, dirs watchSet) {
	dirs = watchSet{}
	add := func(path string) {
		if path == "" {
			return
		}
		path = filepath.Clean(path)
		files = append(files, path)
		d := filepath.Dir(path)
		if dirs[d] == nil {
			dirs[d] = map[string]bool{}
		}
		dirs[d][filepath.Base(path)] = true
	}
	add(s.Config.File)
	pdir := filepath.Clean(s.Config.Partners)
	add(pdir) // the directory itself may be a symlink that is swapped
	dirs[pdir] = map[string]bool{"": true}
	if entries, err := os.ReadDir(pdir); err == nil {
		for _, e := range entries {
			// The files partners.Load reads (an editor's swap file is not one).
			if n := e.Name(); strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml") {
				files = append(files, filepath.Join(pdir, n))
			}
		}
	}
	cur := s.Current()
	for _, k := range cur.Keys {
		add(k.Cert)
		add(k.Key)
		add(k.KeyPasswordFile)
	}
	for _, c := range cur.Certificates {
		add(c.File)
	}
	slices.Sort(files)
	return slices.Compact(files), dirs
}

// fingerprint hashes the names and contents of files (following
// symlinks), so that events that change nothing (a touch, an editor's swap
// file, the database next to the configuration) do not reload.
func fingerprint(files []string) []byte {
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00", f)
		if st, err := os.Stat(f); err != nil {
			fmt.Fprintf(h, "missing\x00")
			continue
		} else if st.IsDir() {
			fmt.Fprintf(h, "dir\x00")
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintf(h, "unreadable %v\x00", err)
			continue
		}
		fmt.Fprintf(h, "%d\x00", len(b))
		h.Write(b)
	}
	return h.Sum(nil)
}

// relevant reports whether an event on name matters: anything in the
// partner directory, a watched file, or a Kubernetes-style "..data" swap.
func (w watchSet) relevant(name string) bool {
	names := w[filepath.Dir(name)]
	base := filepath.Base(name)
	return names[""] || names[base] || strings.HasPrefix(base, "..")
}

// watchFiles reloads, debounced, when a file a reload reads changes. It
// watches directories, not files, so that an editor's rename-replace and a
// Kubernetes symlink swap are seen; after every attempt the watch list
// follows the new inputs, and a directory whose symlink now resolves
// elsewhere is watched anew.
func (s *Server) watchFiles(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("server: file watcher: %w", err)
	}
	defer w.Close()
	_, dirs := s.inputs()
	watched := map[string]string{} // directory -> what it resolved to
	rewatch := func(dirs watchSet) {
		for d, target := range watched {
			now, _ := filepath.EvalSymlinks(d)
			if _, ok := dirs[d]; !ok || now != target {
				_ = w.Remove(d)
				delete(watched, d)
			}
		}
		for d := range dirs {
			if _, ok := watched[d]; ok {
				continue
			}
			target, _ := filepath.EvalSymlinks(d)
			if err := w.Add(d); err != nil {
				s.Log.Warn("cannot watch for configuration changes; use SIGHUP", "dir", d, "err", err)
				continue
			}
			watched[d] = target
		}
	}
	rewatch(dirs)
	// A change between New and now made no event: compare the contents.
	_ = s.reloadFrom(ctx, "file change", false)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			s.Log.Warn("configuration file watcher", "err", err)
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if dirs.relevant(ev.Name) {
				timer.Reset(reloadDebounce)
			}
		case <-timer.C:
			_ = s.reloadFrom(ctx, "file change", false)
			_, dirs = s.inputs()
			rewatch(dirs)
		}
	}
}

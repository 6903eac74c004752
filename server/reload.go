package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/partners"
)

// Snapshot is one immutable state of what a reload replaces: the partner
// directory and our identity keys, with the protocol endpoints built on
// them. The AS2 and AS4 handlers read the current snapshot once per request,
// so an exchange finishes with the configuration it started with.
type Snapshot struct {
	// Partners is the partner directory.
	Partners *partners.Directory
	// Keys are the key files of every identity (identity.keys, then
	// identities[].keys) the endpoints use.
	Keys []config.KeyPair
	// CertWarning is the cert_warning in force.
	CertWarning time.Duration
	// Certificates are every partner certificate and identity certificate,
	// for expiry reporting (metrics).
	Certificates []Certificate
	// Loaded is when the snapshot was built.
	Loaded time.Time

	as2 http.Handler
	as4 http.Handler
	// sends are our identities for sending, one for each identity
	// (config.AllIdentities), with their keys.
	sends []sendKeys
}

// ReloadStatus is the outcome of the last reload attempt.
type ReloadStatus struct {
	// Time of the last attempt (the start, before any reload).
	Time time.Time
	// Trigger: "start", "sighup", "file change" or "api".
	Trigger string
	// OK reports whether the last attempt applied; when false, Err says
	// why and the previous configuration is still serving.
	OK  bool
	Err string
	// LastSuccess is when the running configuration was loaded.
	LastSuccess time.Time
	// NeedsRestart names settings changed in the configuration file that
	// only a restart applies (store, listen, …); empty when none.
	NeedsRestart []string
	// Partners is the number of partners in the running configuration.
	Partners int
}

// reloadState is the Server's reloadable configuration.
type reloadState struct {
	current atomic.Pointer[Snapshot]
	mu      sync.Mutex // serialises reloads
	status  atomic.Pointer[ReloadStatus]
	hooks   []func(ReloadStatus)
	// mounted says which protocol endpoints were mounted at start; a reload
	// cannot add or remove one.
	as2Mounted, as4Mounted bool
	// fingerprint of the inputs at the last file-change attempt.
	fingerprint []byte
}

// ReloadOnSignal is Reload for a SIGHUP (the status says "sighup").
func (s *Server) ReloadOnSignal(ctx context.Context) error { return s.reloadFrom(ctx, "sighup", true) }

// Current returns the configuration snapshot in force.
func (s *Server) Current() *Snapshot { return s.reload.current.Load() }

// Directory returns the partner directory in force.
func (s *Server) Directory() *partners.Directory { return s.Current().Partners }

// ReloadStatus returns the outcome of the last reload attempt.
func (s *Server) ReloadStatus() ReloadStatus {
	if st := s.reload.status.Load(); st != nil {
		return *st
	}
	return ReloadStatus{}
}

// OnReload registers f to be called after every reload attempt, successful
// or not (for example to count reloads by result). Register before Serve;
// f runs while reloads are serialised, so it must not call Reload.
func (s *Server) OnReload(f func(ReloadStatus)) {
	s.reload.mu.Lock()
	defer s.reload.mu.Unlock()
	s.reload.hooks = append(s.reload.hooks, f)
}

// Reload re-reads the configuration file (when there is one), the partner
// directory and the identity key files, validates all of it, and only then
// switches to it. On any error the running configuration stays, the error
// is logged at ERROR and returned, and ReloadStatus reports it. Settings
// other than identity.keys and cert_warning are not applied; when they
// changed, ReloadStatus.NeedsRestart names them.
func (s *Server) Reload(ctx context.Context) error { return s.reloadFrom(ctx, "api", true) }

// reloadFrom reloads; unless force, only when the inputs' contents changed
// since the last attempt.
func (s *Server) reloadFrom(ctx context.Context, trigger string, force bool) error {
	s.reload.mu.Lock()
	defer s.reload.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	files, _ := s.inputs()
	fp := fingerprint(files)
	if !force && bytes.Equal(fp, s.reload.fingerprint) {
		s.Log.Debug("configuration files touched but unchanged; not reloading", "trigger", trigger)
		return nil
	}
	s.reload.fingerprint = fp
	old := s.Current()
	snap, restart, err := s.loadSnapshot()
	st := ReloadStatus{Time: time.Now(), Trigger: trigger, OK: err == nil, NeedsRestart: restart}
	if err != nil {
		prev := s.ReloadStatus()
		st.Err = err.Error()
		st.LastSuccess, st.Partners = prev.LastSuccess, len(old.Partners.Partners)
		s.Log.Error("configuration reload failed; the running configuration stays", "trigger", trigger, "err", err)
	} else {
		s.reload.current.Store(snap)
		st.LastSuccess, st.Partners = snap.Loaded, len(snap.Partners.Partners)
		added, removed, changed := diffPartners(old, snap)
		s.Log.Info("configuration reloaded", "trigger", trigger, "partners", st.Partners, "identity_keys", len(snap.Keys),
			"added", added, "removed", removed, "changed", changed, "keys_changed", !slices.Equal(old.Keys, snap.Keys) || !sameCerts(old, snap))
		for _, w := range snap.Partners.Warnings {
			s.Log.Warn("partner configuration", "warning", w)
		}
		s.logCertificates(snap.Partners, snap.Keys, snap.CertWarning)
	}
	if len(restart) > 0 {
		s.Log.Warn("configuration file changes need a restart; they are not applied", "settings", restart)
	}
	s.reload.status.Store(&st)
	for _, h := range s.reload.hooks {
		h(st)
	}
	return err
}

// loadSnapshot builds a snapshot from the files, validating everything:
// the configuration file, every partner file and certificate, retention
// against the dedup windows, and the identity keys (each must belong to
// its certificate; the endpoints are built with them).
func (s *Server) loadSnapshot() (*Snapshot, []string, error) {
	running := s.Config
	next := running
	if running.File != "" {
		c, err := running.Reload() // the file, with the command line's overrides
		if err != nil {
			return nil, nil, err
		}
		next = c
	}
	restart := needsRestart(running, next)
	dir, err := partners.Load(running.Partners)
	if err != nil {
		return nil, restart, err
	}
	if err := checkWindows(dir, running.Retention); err != nil {
		return nil, restart, err
	}
	// Identity names are fixed at start: the running ones.
	if err := checkIdentities(dir, running.AllIdentities()); err != nil {
		return nil, restart, err
	}
	snap, err := s.buildSnapshot(dir, next)
	if err != nil {
		return nil, restart, err
	}
	if s.reload.as4Mounted && snap.as4 == nil {
		return nil, restart, errors.New("server: identity.keys: no key usable for AS4 is left; the AS4 endpoint is running, so it needs one")
	}
	if !s.reload.as4Mounted && snap.as4 != nil {
		restart = append(restart, "identity.keys (the AS4 endpoint is mounted at start only)")
		snap.as4 = nil
	}
	return snap, restart, nil
}

// reloadable are the configuration keys a reload applies.
var reloadable = map[string]bool{"identity.keys": true, "identity.allow_weak_keys": true, "cert_warning": true, "identities": true}

// needsRestart names the settings, by configuration key, that differ
// between the running configuration and the file, other than reloadable ones.
func needsRestart(running, next *config.Config) []string {
	var out []string
	var walk func(prefix string, a, b reflect.Value)
	walk = func(prefix string, a, b reflect.Value) {
		t := a.Type()
		for i := range t.NumField() {
			tag := strings.Split(t.Field(i).Tag.Get("mapstructure"), ",")[0]
			if tag == "" || tag == "-" {
				continue
			}
			key := prefix + tag
			if reloadable[key] {
				continue
			}
			fa, fb := a.Field(i), b.Field(i)
			if fa.Kind() == reflect.Struct {
				walk(key+".", fa, fb)
				continue
			}
			if !reflect.DeepEqual(fa.Interface(), fb.Interface()) {
				out = append(out, key)
			}
		}
	}
	walk("", reflect.ValueOf(running).Elem(), reflect.ValueOf(next).Elem())
	// identities: their keys reload, their names need a restart.
	if !sameIdentityNames(running.Identities, next.Identities) {
		out = append(out, "identities (names)")
	}
	return out
}

// diffPartners lists the partner ids added, removed and changed (agreement
// or certificates) from a to b.
func diffPartners(a, b *Snapshot) (added, removed, changed []string) {
	byID := func(d *partners.Directory) map[string]*partners.Partner {
		m := map[string]*partners.Partner{}
		for _, p := range d.Partners {
			m[p.ID] = p
		}
		return m
	}
	am, bm := byID(a.Partners), byID(b.Partners)
	for id, p := range bm {
		q, ok := am[id]
		switch {
		case !ok:
			added = append(added, id)
		case !reflect.DeepEqual(p, q) || !sameCertList(a.Partners.AS2Certificates(q), b.Partners.AS2Certificates(p)) ||
			!sameCertList(a.Partners.AS4Certificates(q), b.Partners.AS4Certificates(p)) ||
			!sameTrust(a.Partners.AS2Trust(q), b.Partners.AS2Trust(p)) || !sameTrust(a.Partners.AS4Trust(q), b.Partners.AS4Trust(p)):
			changed = append(changed, id)
		}
	}
	for id := range am {
		if _, ok := bm[id]; !ok {
			removed = append(removed, id)
		}
	}
	slices.Sort(added)
	slices.Sort(removed)
	slices.Sort(changed)
	return added, removed, changed
}

func sameCertList[T interface{ Equal(T) bool }](a, b []T) bool {
	return slices.EqualFunc(a, b, func(x, y T) bool { return x.Equal(y) })
}

// sameCerts reports whether the identity certificates are unchanged.
func sameCerts(a, b *Snapshot) bool {
	var ra, rb [][]byte
	for _, c := range a.Certificates {
		if c.Use == "identity" && c.Cert != nil {
			ra = append(ra, c.Cert.Raw)
		}
	}
	for _, c := range b.Certificates {
		if c.Use == "identity" && c.Cert != nil {
			rb = append(rb, c.Cert.Raw)
		}
	}
	return slices.EqualFunc(ra, rb, bytes.Equal)
}

// handle serves a protocol from the snapshot current when the request
// arrives.
func (s *Server) handle(pick func(*Snapshot) http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pick(s.Current()).ServeHTTP(w, r)
	})
}

// checkCurrentCertificates logs the certificate findings of the running
// configuration.
func (s *Server) checkCurrentCertificates() {
	c := s.Current()
	s.logCertificates(c.Partners, c.Keys, c.CertWarning)
}

// String is the form of a status, for logs and tests.
func (st ReloadStatus) String() string {
	if st.OK {
		return fmt.Sprintf("reload ok at %s (%s), %d partners", st.Time.Format(time.RFC3339), st.Trigger, st.Partners)
	}
	return fmt.Sprintf("reload failed at %s (%s): %s", st.Time.Format(time.RFC3339), st.Trigger, st.Err)
}

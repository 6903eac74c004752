package server

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/testpki"
)

// reloadFixture is a gateway configured from files in a temporary
// directory, served over loopback.
type reloadFixture struct {
	t        *testing.T
	dir      string
	pdir     string
	cfgFile  string
	srv      *Server
	url      string
	statuses chan ReloadStatus
	// gw are our two identity certificates (keys 0 and 1); partner
	// certificates and keys by partner id.
	gw    [2]*x509.Certificate
	gwKey [2]*rsa.PrivateKey
	pcert map[string]*x509.Certificate
	pkey  map[string]*rsa.PrivateKey
	// handler hooks
	block   atomic.Pointer[chan struct{}] // set: a message from "gone" waits on it
	entered chan struct{}
}

var reloadPartners = []string{"stay", "gone", "plain", "new"}

// newReloadFixture writes the files, lets layout rearrange them, and starts
// the gateway.
func newReloadFixture(t *testing.T, layout ...func(*reloadFixture)) *reloadFixture {
	t.Helper()
	keys := testpki.RSAKeys(t, 6)
	f := &reloadFixture{t: t, dir: t.TempDir(), statuses: make(chan ReloadStatus, 16),
		pcert: map[string]*x509.Certificate{}, pkey: map[string]*rsa.PrivateKey{}, entered: make(chan struct{}, 1)}
	f.pdir = filepath.Join(f.dir, "partners")
	os.Mkdir(f.pdir, 0o750)
	for i := range 2 {
		f.gwKey[i] = keys[i]
		f.gw[i] = testpki.SelfSigned(t, keys[i], testpki.Cert{CommonName: fmt.Sprintf("gateway %d", i), Serial: int64(i + 1)})
		testpki.WriteKeyPair(t, f.dir, fmt.Sprintf("gw%d", i), f.gw[i], keys[i])
	}
	for i, id := range reloadPartners {
		f.pkey[id] = keys[2+i]
		f.pcert[id] = testpki.SelfSigned(t, keys[2+i], testpki.Cert{CommonName: id, Serial: int64(10 + i)})
		os.WriteFile(filepath.Join(f.pdir, id+".pem"), testpki.CertPEM(f.pcert[id]), 0o600)
	}
	f.writePartner("stay", false)
	f.writePartner("gone", false)
	f.writePartner("plain", false)
	f.cfgFile = filepath.Join(f.dir, "gateway.yaml")
	f.writeConfig("gw0", "")
	for _, l := range layout {
		l(f)
	}
	cfg, err := config.Load(f.cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.SetHandler(exchange.HandlerFunc(func(ctx context.Context, m *exchange.Message) error {
		if ch := f.block.Load(); ch != nil && m.Partner == "gone" {
			f.entered <- struct{}{}
			<-*ch
		}
		return nil
	}))
	s.OnReload(func(st ReloadStatus) { f.statuses <- st })
	f.srv = s
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.url = "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return f
}

// writePartner writes id's partner file by an editor's rename-replace.
func (f *reloadFixture) writePartner(id string, requireEncryption bool) {
	f.t.Helper()
	y := fmt.Sprintf(`id: %[1]s
as2:
  as2_id: %[2]s
  certificates: [%[1]s.pem]
  require_signature: true
  require_encryption: %[3]v
as4:
  party_id: urn:%[1]s
  certificates: [%[1]s.pem]
  require_encryption: %[3]v
  pmodes:
    - id: invoices
      service: urn:invoicing
      action: Deliver
`, id, strings.ToUpper(id), requireEncryption)
	f.replace(filepath.Join(f.pdir, id+".yaml"), y)
}

func (f *reloadFixture) replace(path, content string) {
	f.t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".swp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		f.t.Fatal(err)
	}
}

// writeConfig writes the gateway file with the identity keys named
// (gw0, gw1: first signs) and extra settings.
func (f *reloadFixture) writeConfig(keys string, extra string) {
	f.t.Helper()
	var ks strings.Builder
	for _, k := range strings.Split(keys, ",") {
		fmt.Fprintf(&ks, "    - cert: %s.crt\n      key: %s.key\n", k, k)
	}
	f.replace(filepath.Join(f.dir, "gateway.yaml"), fmt.Sprintf(`store: sqlite:gw.db
partners: partners
identity:
  as2_id: GW
  party_id: urn:gw
  keys:
%shandler:
  inbox: inbox
quarantine_dir: quarantine
archive_dir: archive
shutdown_timeout: 5s
drain_period: 0s
admin:
  listen: 127.0.0.1:0
%s`, ks.String(), extra))
}

// next waits for the next reload attempt.
func (f *reloadFixture) next(what string) ReloadStatus {
	f.t.Helper()
	select {
	case st := <-f.statuses:
		f.t.Logf("%s: %s", what, st)
		return st
	case <-time.After(15 * time.Second):
		f.t.Fatalf("%s: no reload within 15s", what)
	}
	return ReloadStatus{}
}

// sender sends unique messages as one partner.
type sender struct {
	as2 *as2client.Client
	as4 *client.Client
	id  string
	url string
	n   atomic.Int64
}

func (f *reloadFixture) sender(id string, encrypt bool, trust ...*x509.Certificate) *sender {
	if len(trust) == 0 {
		trust = f.gw[:]
	}
	s := &sender{id: id, url: f.url}
	s.as2 = &as2client.Client{URL: f.url + "/as2", From: strings.ToUpper(id), To: "GW",
		SignCert: f.pcert[id], SignKey: f.pkey[id], SignDigest: "sha256",
		MDN: as2client.MDNSync, SignedMDN: true, MDNCerts: trust}
	s.as4 = &client.Client{Signer: f.pkey[id], Certificate: f.pcert[id], ReceiptSigners: trust}
	if encrypt {
		// Senders keep encrypting to our first certificate throughout.
		s.as2.RecipientCerts, s.as2.Cipher = []*x509.Certificate{f.gw[0]}, "aes256-cbc"
		s.as4.Encryption = &client.Encryption{Recipient: f.gw[0]}
	}
	return s
}

// sendAS2 sends one message and returns "" when it was processed, else the
// disposition or error.
func (s *sender) sendAS2(ctx context.Context) string {
	n := s.n.Add(1)
	msg, err := s.as2.Prepare([]byte(fmt.Sprintf("<Invoice>%s %d</Invoice>", s.id, n)), "application/xml", "invoice.xml")
	if err != nil {
		return err.Error()
	}
	res, err := s.as2.Send(ctx, msg)
	if err != nil {
		return err.Error()
	}
	if !res.OK() || res.MDN == nil || res.MDN.Disposition.IsWarning() {
		d := ""
		if res.MDN != nil {
			d = res.MDN.Disposition.String()
		}
		return fmt.Sprintf("status %d, disposition %q, problems %v", res.Status, d, res.Problems)
	}
	return ""
}

func (s *sender) sendAS4(ctx context.Context) string {
	n := s.n.Add(1)
	_, resp, err := s.as4.Send(ctx, s.url+"/as4", &client.Message{
		From: as4.PartyID{Value: "urn:" + s.id}, To: as4.PartyID{Value: "urn:gw"},
		Service: "urn:invoicing", Action: "Deliver",
		Payloads: []client.Payload{{MimeType: "application/xml", Data: []byte(fmt.Sprintf("<Invoice>%s %d</Invoice>", s.id, n))}},
	})
	if err != nil {
		return err.Error()
	}
	if resp.Receipt == nil {
		return fmt.Sprintf("status %d, no receipt", resp.Status)
	}
	return ""
}

// expect sends one AS2 and one AS4 message as s: want "" for processed,
// else substrings of the AS2 and AS4 refusals.
func (f *reloadFixture) expect(s *sender, want2, want4 string) {
	f.t.Helper()
	ctx := context.Background()
	for _, c := range []struct {
		proto, want, got string
	}{{"as2", want2, s.sendAS2(ctx)}, {"as4", want4, s.sendAS4(ctx)}} {
		if c.want == "" && c.got != "" || c.want != "" && !strings.Contains(c.got, c.want) {
			f.t.Errorf("%s %s: got %q, want %q", s.id, c.proto, c.got, c.want)
		}
	}
}

// traffic runs AS2 and AS4 senders as partner "stay" until stopped.
type traffic struct {
	sent, failed atomic.Int64
	mu           sync.Mutex
	failures     []string
	stop         context.CancelFunc
	wg           sync.WaitGroup
}

func (f *reloadFixture) startTraffic(s *sender) *traffic {
	ctx, cancel := context.WithCancel(context.Background())
	tr := &traffic{stop: cancel}
	for _, send := range []func(context.Context) string{s.sendAS2, s.sendAS4} {
		tr.wg.Go(func() {
			for i := 0; ctx.Err() == nil && i < 5000; i++ {
				why := send(context.Background())
				tr.sent.Add(1)
				if why != "" {
					tr.failed.Add(1)
					tr.mu.Lock()
					tr.failures = append(tr.failures, why)
					tr.mu.Unlock()
				}
			}
		})
	}
	return tr
}

// TestReloadUnderTraffic adds, changes and removes partners, rotates our
// identity key and writes a broken partner file while partner "stay"
// sends AS2 and AS4 messages without pause through the real HTTP server:
// none of its messages may fail, and each change takes effect.
func TestReloadUnderTraffic(t *testing.T) {
	f := newReloadFixture(t)
	stay, gone, plain, nw := f.sender("stay", true), f.sender("gone", true), f.sender("plain", false), f.sender("new", true)

	// Before: "new" is unknown, "plain" may send unencrypted.
	f.expect(nw, "unknown-trading-partner", "EBMS:0010")
	f.expect(gone, "", "")
	f.expect(plain, "", "")

	tr := f.startTraffic(stay)
	reloads := 0

	// 1. Add a partner (editor's rename-replace in the watched directory).
	f.writePartner("new", false)
	if st := f.next("add"); !st.OK || st.Trigger != "file change" || st.Partners != 4 {
		t.Fatalf("add: %+v", st)
	}
	reloads++
	f.expect(nw, "", "")

	// 2. Change a partner: require_encryption on.
	f.writePartner("plain", true)
	if st := f.next("require_encryption"); !st.OK {
		t.Fatalf("change: %+v", st)
	}
	reloads++
	f.expect(plain, "insufficient-message-security", "EBMS:0103")

	// 3. Remove a partner while one of its messages is in progress: that
	// exchange finishes with the configuration it started with.
	release := make(chan struct{})
	f.block.Store(&release)
	inflight := make(chan string, 1)
	go func() { inflight <- gone.sendAS2(context.Background()) }()
	<-f.entered
	os.Remove(filepath.Join(f.pdir, "gone.yaml"))
	if st := f.next("remove"); !st.OK || st.Partners != 3 {
		t.Fatalf("remove: %+v", st)
	}
	reloads++
	f.block.Store(nil)
	close(release)
	if why := <-inflight; why != "" {
		t.Errorf("exchange in progress during the reload that removed its partner: %s", why)
	}
	f.expect(gone, "unknown-trading-partner", "EBMS:0010")

	// 4. Rotate our identity key: the new key signs MDNs and receipts, the
	// old one still decrypts what senders encrypted to it.
	f.writeConfig("gw1,gw0", "")
	if st := f.next("rotate"); !st.OK || len(st.NeedsRestart) != 0 {
		t.Fatalf("rotate: %+v", st)
	}
	reloads++
	f.expect(f.sender("new", true, f.gw[1]), "", "")
	f.expect(f.sender("new", true, f.gw[0]), "problems", "signature")

	// 5. A broken partner file: the reload fails and says why, the running
	// configuration keeps serving (explicit reloads fail the same way).
	f.replace(filepath.Join(f.pdir, "broken.yaml"), "id: broken\nas2:\n  as2_id: BROKEN\n  colour: red\n")
	st := f.next("broken file")
	if st.OK || !strings.Contains(st.Err, "broken.yaml") || !strings.Contains(st.Err, "colour") {
		t.Fatalf("broken: %+v", st)
	}
	reloads++
	if got := f.srv.ReloadStatus(); got.OK || got.Err != st.Err || got.Partners != 3 || got.LastSuccess.After(st.Time) {
		t.Fatalf("ReloadStatus after a failed reload: %+v", got)
	}
	if err := f.srv.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "broken.yaml") {
		t.Fatalf("Reload with a broken file: %v", err)
	}
	f.next("explicit reload with the broken file")
	reloads++
	f.expect(nw, "", "")
	f.expect(f.sender("new", true, f.gw[1]), "", "")
	os.Remove(filepath.Join(f.pdir, "broken.yaml"))
	if st := f.next("broken file removed"); !st.OK || st.Partners != 3 {
		t.Fatalf("after removing the broken file: %+v", st)
	}
	reloads++

	tr.stop()
	tr.wg.Wait()
	t.Logf("figures: %d messages sent by partner stay (AS2 and AS4) during %d reloads, %d failed", tr.sent.Load(), reloads, tr.failed.Load())
	if tr.failed.Load() != 0 {
		t.Fatalf("%d of %d messages of a partner that exists throughout failed: %v", tr.failed.Load(), tr.sent.Load(), tr.failures[:min(5, len(tr.failures))])
	}
	if tr.sent.Load() < 2*int64(reloads) {
		t.Fatalf("only %d messages during %d reloads", tr.sent.Load(), reloads)
	}
}

// TestReloadReportsSettingsThatNeedARestart changes the store and listen
// address in the configuration file: the reload applies the partner
// directory and names those settings instead of ignoring them.
func TestReloadReportsSettingsThatNeedARestart(t *testing.T) {
	f := newReloadFixture(t)
	f.writeConfig("gw0", "listen: 127.0.0.1:9999\nlimits:\n  max_body_bytes: 1000\n")
	st := f.next("config change")
	if !st.OK || strings.Join(st.NeedsRestart, ",") != "listen,limits.max_body_bytes" {
		t.Fatalf("status %+v", st)
	}
	// An unusable identity key fails the reload and names its files.
	os.WriteFile(filepath.Join(f.dir, "gw0.key"), testpki.KeyPEM(t, f.gwKey[1]), 0o600)
	st = f.next("mismatched key")
	if st.OK || !strings.Contains(st.Err, "gw0.crt") || !strings.Contains(st.Err, "does not belong") {
		t.Fatalf("status %+v", st)
	}
	f.expect(f.sender("stay", true, f.gw[0]), "", "")
}

// TestReloadFollowsKubernetesSymlinkSwap mounts the partner directory the
// way Kubernetes projects a ConfigMap: each file is a symlink through
// "..data", and an update swaps "..data" to a new directory.
func TestReloadFollowsKubernetesSymlinkSwap(t *testing.T) {
	v1 := ""
	f := newReloadFixture(t, func(f *reloadFixture) {
		v1 = filepath.Join(f.pdir, "..2026_12_01_v1")
		os.Mkdir(v1, 0o750)
		for _, n := range []string{"stay.yaml", "stay.pem"} {
			os.Rename(filepath.Join(f.pdir, n), filepath.Join(v1, n))
		}
		for _, n := range []string{"gone.yaml", "gone.pem", "plain.yaml", "plain.pem"} {
			os.Remove(filepath.Join(f.pdir, n))
		}
		os.Symlink(filepath.Base(v1), filepath.Join(f.pdir, "..data"))
		os.Symlink("..data/stay.yaml", filepath.Join(f.pdir, "stay.yaml"))
		os.Symlink("..data/stay.pem", filepath.Join(f.pdir, "stay.pem"))
	})
	if n := len(f.srv.Directory().Partners); n != 1 {
		t.Fatalf("%d partners", n)
	}
	stay := f.sender("stay", false)
	f.expect(stay, "", "")

	// The update: a new directory, then an atomic swap of ..data.
	v2 := filepath.Join(f.pdir, "..2026_12_01_v2")
	os.Mkdir(v2, 0o750)
	b, _ := os.ReadFile(filepath.Join(v1, "stay.yaml"))
	os.WriteFile(filepath.Join(v2, "stay.yaml"), []byte(strings.ReplaceAll(string(b), "require_encryption: false", "require_encryption: true")), 0o600)
	os.WriteFile(filepath.Join(v2, "stay.pem"), testpki.CertPEM(f.pcert["stay"]), 0o600)
	os.Symlink(filepath.Base(v2), filepath.Join(f.pdir, "..data_tmp"))
	os.Rename(filepath.Join(f.pdir, "..data_tmp"), filepath.Join(f.pdir, "..data"))
	os.RemoveAll(v1)
	if st := f.next("symlink swap"); !st.OK || st.Partners != 1 {
		t.Fatalf("status %+v", st)
	}
	f.expect(stay, "insufficient-message-security", "EBMS:0103")
}

// TestReloadOnUnchangedFilesDoesNothing touches a partner file without
// changing it: no reload is attempted.
func TestReloadOnUnchangedFilesDoesNothing(t *testing.T) {
	f := newReloadFixture(t)
	now := time.Now()
	os.Chtimes(filepath.Join(f.pdir, "stay.yaml"), now, now)
	b, _ := os.ReadFile(filepath.Join(f.pdir, "stay.yaml"))
	f.replace(filepath.Join(f.pdir, "stay.yaml"), string(b))
	select {
	case st := <-f.statuses:
		t.Fatalf("reload attempted for unchanged files: %+v", st)
	case <-time.After(3 * reloadDebounce):
	}
	if st := f.srv.ReloadStatus(); st.Trigger != "start" || !st.OK {
		t.Fatalf("status %+v", st)
	}
}

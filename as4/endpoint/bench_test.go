package endpoint_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/as4/endpoint"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/inbox"
	"github.com/edigateway/gateway/internal/xmlenc"
	"github.com/edigateway/gateway/store/sqlitestore"
)

// benchInterchange is an EDIFACT interchange of exactly size bytes (at
// least its envelope's length) whose UNB 0020 control reference is ref, so
// that business dedup sees one distinct interchange per message.
func benchInterchange(ref string, size int) []byte {
	head := "UNA:+.? 'UNB+UNOA:2+ACME:14+GATEWAY:14+240315:0930+" + ref + "'UNH+1+INVOIC:D:96A:UN'BGM+380+" + ref + "+9'"
	const line = "LIN+1++9783898307529:EN'QTY+47:5'PRI+AAA:27.5'"
	var sb strings.Builder
	sb.WriteString(head)
	segments := 2 // UNH, BGM
	tail := func(n int) string { return fmt.Sprintf("UNT+%d+1'UNZ+1+%s'", n, ref) }
	for sb.Len()+len(line)+len(tail(segments+4))+len("FTX+AAI+++'") <= size {
		sb.WriteString(line)
		segments += 3
	}
	if fill := size - sb.Len() - len(tail(segments+2)) - len("FTX+AAI+++'"); fill >= 0 {
		sb.WriteString("FTX+AAI+++" + strings.Repeat("X", fill) + "'")
		segments++
	}
	sb.WriteString(tail(segments + 1))
	return []byte(sb.String())
}

// TestBenchInterchange checks the benchmark's payload: exact size, and the
// envelope the business ledger reads.
func TestBenchInterchange(t *testing.T) {
	b := benchInterchange("B00000000042", 10<<10)
	if len(b) != 10<<10 {
		t.Fatalf("size %d, want %d", len(b), 10<<10)
	}
	s := string(b)
	if !strings.HasPrefix(s, "UNA:+.? 'UNB+UNOA:2+ACME:14+GATEWAY:14+240315:0930+B00000000042'UNH+1+") ||
		!strings.HasSuffix(s, "'UNZ+1+B00000000042'") {
		t.Fatalf("envelope: %.80s … %s", s, s[len(s)-40:])
	}
	// UNT counts UNH to UNT: every segment between UNB and UNZ.
	body := s[strings.Index(s, "UNH+"):strings.LastIndex(s, "UNZ+")]
	if n := strings.Count(body, "'"); !strings.Contains(s, fmt.Sprintf("UNT+%d+1'", n)) {
		t.Fatalf("UNT does not count the %d segments", n)
	}
}

// BenchmarkEndpointSignedEncryptedCompressed10KB posts 10 KB AS4 user
// messages, gzip-compressed, signed (RSA-SHA256) and encrypted (RSA-OAEP
// key transport, AES-128-GCM), through the endpoint behind a real HTTP
// server, with a pipeline on SQLite (dedup store, business ledger, audit)
// and the inbox dir handler, from four concurrent senders. Every signed
// receipt is verified, NonRepudiationInformation included. The messages are
// built before the timer starts, so the sender's RSA signatures are not
// counted. Each message costs the gateway two RSA private-key operations
// (key unwrap, receipt signature): compare msgs/s with
// BenchmarkRSA2048PrivateOp's ops/s ÷ 2.
func BenchmarkEndpointSignedEncryptedCompressed10KB(b *testing.B) {
	k := getKeys(b)
	url, inboxDir, st := newBenchGateway(b, k)
	c := rsaClient(k)
	c.Encryption.Options = xmlenc.EncryptOptions{Content: xmlenc.AlgAES128GCM}
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	defer tr.CloseIdleConnections()
	c.HTTP = &http.Client{Transport: tr, Timeout: time.Minute}
	var run [3]byte
	if _, err := rand.Read(run[:]); err != nil {
		b.Fatal(err)
	}
	msgs := make([]*client.Outgoing, b.N)
	for i := range msgs {
		ref := fmt.Sprintf("B%x%07d", run, i) // UNB 0020: at most 14 characters
		m := &client.Message{
			MessageID: fmt.Sprintf("bench-%x-%d@acme.test", run, i),
			From:      acmeParty, To: gatewayParty,
			Service: testService, Action: testAction,
			Payloads: []client.Payload{{MimeType: "application/edifact", Data: benchInterchange(ref, 10<<10), Compress: true}},
		}
		out, err := c.Build(m)
		if err != nil {
			b.Fatal(err)
		}
		msgs[i] = out
	}
	b.SetBytes(10 << 10)
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(msgs) {
					return
				}
				resp, err := c.Post(context.Background(), url, msgs[i])
				if err == nil && resp.Receipt.RefToMessageID != msgs[i].MessageID {
					err = fmt.Errorf("receipt refers to %q", resp.Receipt.RefToMessageID)
				}
				if err != nil {
					errs <- fmt.Errorf("message %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	files, err := inbox.Payloads(filepath.Join(inboxDir, "acme"))
	if err != nil || len(files) != b.N {
		b.Fatalf("inbox holds %d files (%v), want %d", len(files), err, b.N)
	}
	// The business ledger saw the last message's interchange once.
	last := fmt.Sprintf("B%x%07d", run, b.N-1)
	ics, err := st.FindInterchanges(context.Background(), dedup.InterchangeQuery{Reference: last})
	if err != nil || len(ics) != 1 || ics[0].Retries != 0 {
		b.Fatalf("ledger for %s: %v %+v", last, err, ics)
	}
}

// newBenchGateway is the gateway as `serve` wires it, on the generated
// agreement: endpoint behind an HTTP server, pipeline on a SQLite store in
// a temporary directory with its ledger and audit table, the inbox dir
// handler, JSON logs (discarded). It returns the AS4 URL, the inbox and
// the store.
func newBenchGateway(b *testing.B, k testKeys) (url, inboxDir string, st *sqlitestore.Store) {
	b.Helper()
	dir := loadPartners(b, defaultPartners(b, k))
	root := b.TempDir()
	var err error
	st, err = sqlitestore.Open(context.Background(), filepath.Join(root, "gateway.db"), dedup.Options{Lease: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	inboxDir = filepath.Join(root, "inbox")
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	pl := &exchange.Pipeline{Store: st, Ledger: st, Audit: st.AuditSink(), Handler: inbox.Dir{Root: inboxDir}, Log: log, Lease: time.Minute}
	ep, err := endpoint.New(endpoint.Config{
		Partners: dir, Keys: []xmlenc.KeyPair{k.gatewayRSA}, Pipeline: pl,
		PartyID: gatewayParty.Value, PartyType: gatewayParty.Type,
		Log: log, Host: "gateway.test", SpoolDir: root,
	})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(ep)
	b.Cleanup(srv.Close)
	return srv.URL + "/as4", inboxDir, st
}

// BenchmarkRSA2048PrivateOp signs a SHA-256 digest with the gateway's
// receipt key (the key that also unwraps the message keys): the rate of
// RSA-2048 private-key operations on this machine, in the same run.
func BenchmarkRSA2048PrivateOp(b *testing.B) {
	k := getKeys(b)
	signer, ok := k.gatewayRSA.Key.(crypto.Signer)
	if !ok {
		b.Fatal(errors.New("the gateway's key is not a signer"))
	}
	d := sha256.Sum256([]byte("x"))
	b.ResetTimer()
	for range b.N {
		if _, err := signer.Sign(rand.Reader, d[:], crypto.SHA256); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

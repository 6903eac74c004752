package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
)

func openInternal(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "gw.db"), dedup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// holdWriter occupies the writer goroutine with a request that waits for
// release, so that the requests queued meanwhile form the next batch.
func holdWriter(t *testing.T, s *Store) (release func()) {
	t.Helper()
	started, gate := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.w.do(context.Background(), "hold", func(ctx context.Context, tx *sql.Tx) error {
			close(started)
			<-gate
			return nil
		})
	}()
	<-started
	return func() {
		close(gate)
		if err := <-done; err != nil {
			t.Errorf("holding request: %v", err)
		}
	}
}

// waitQueued waits until n requests wait in the writer's channel.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(s.w.reqs) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests queued, want %d", len(s.w.reqs), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func auditCount(t *testing.T, s *Store, messageID string) int {
	t.Helper()
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM audit_records WHERE message_id = ?`, messageID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestGroupCommit: concurrent claims, audit records and accepts of many
// exchanges share transactions (one commit, one fsync, for many of them),
// and each caller gets its own result.
func TestGroupCommit(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	const n = 32
	release := holdWriter(t, s)
	before := s.w.commits.Load()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Audit().Write(ctx, audit.Record{Step: audit.StepReceived, MessageID: fmt.Sprintf("m%d", i)})
		}()
	}
	waitQueued(t, s, n)
	release()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	// The hold's own batch, then the n queued ones in one batch.
	if got := s.w.commits.Load() - before; got != 2 {
		t.Errorf("%d commits for %d queued writes, want 2 (the held one, then one batch)", got, n)
	}

	// Claims and accepts through the Store API, concurrently: all right, in
	// fewer commits than calls.
	before = s.w.commits.Load()
	wg = sync.WaitGroup{}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := dedup.Key(fmt.Sprintf("k%d", i))
			d, err := s.Claim(ctx, dedup.ClaimRequest{Key: key, PayloadSHA256: "h"})
			if err != nil || d.Outcome != dedup.Claimed {
				errs[i] = fmt.Errorf("claim: %v %v", d.Outcome, err)
				return
			}
			errs[i] = s.Accept(ctx, key, d.Token, []byte("r"))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("exchange %d: %v", i, err)
		}
	}
	if got := s.w.commits.Load() - before; got > 2*n {
		t.Errorf("%d commits for %d claims and %d accepts", got, n, n)
	}
	for i := range n {
		d, err := s.Claim(ctx, dedup.ClaimRequest{Key: dedup.Key(fmt.Sprintf("k%d", i)), PayloadSHA256: "h"})
		if err != nil || d.Outcome != dedup.Duplicate || string(d.Reply) != "r" {
			t.Errorf("k%d after accept: %v %v %q", i, d.Outcome, err, d.Reply)
		}
	}
}

// TestGroupCommitIsolatesFailures: a request whose statements fail in a
// batch is rolled back alone (its savepoint); the others of the batch
// commit. A stale accept in a batch fails with ErrStaleClaim and does not
// disturb the claims beside it.
func TestGroupCommitIsolatesFailures(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	release := holdWriter(t, s)
	boom := errors.New("boom")
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.w.do(ctx, "test", func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, `INSERT INTO audit_records (recorded_at, step, partner, protocol, message_id,
	dedup_key, interchange_key, reference, decision, payload_sha256, disposition, error, incident)
VALUES (0, 'received', '', '', ?, '', '', '', '', '', '', '', '')`, fmt.Sprintf("iso%d", i)); err != nil {
					return err
				}
				if i == 1 {
					return boom // after its insert: the insert must be undone
				}
				return nil
			})
		}()
		waitQueued(t, s, i+1)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs[3] = s.Accept(ctx, "nobody", "token", nil)
	}()
	waitQueued(t, s, 4)
	before := s.w.commits.Load()
	release()
	wg.Wait()
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("the good requests failed: %v, %v", errs[0], errs[2])
	}
	if !errors.Is(errs[1], boom) {
		t.Errorf("the failing request: %v, want boom", errs[1])
	}
	if !errors.Is(errs[3], dedup.ErrStaleClaim) {
		t.Errorf("stale accept: %v, want ErrStaleClaim", errs[3])
	}
	if got := s.w.commits.Load() - before; got != 2 {
		t.Errorf("%d commits, want 2 (the hold, then the batch)", got)
	}
	for i, want := range []int{1, 0, 1} {
		if got := auditCount(t, s, fmt.Sprintf("iso%d", i)); got != want {
			t.Errorf("request %d: %d rows, want %d", i, got, want)
		}
	}
}

// TestGroupCommitFailedCommitFailsTheBatch: when the batch's transaction
// cannot commit, every request of it fails, also those whose statements
// had succeeded: none of them is on disk, and none is told otherwise.
func TestGroupCommitFailedCommitFailsTheBatch(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	release := holdWriter(t, s)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 2 {
				// Ends the batch's transaction behind the writer's back: its
				// savepoint release, and so the batch, fails.
				errs[i] = s.w.do(ctx, "test", func(ctx context.Context, tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, `ROLLBACK`)
					return err
				})
				return
			}
			errs[i] = s.Audit().Write(ctx, audit.Record{Step: audit.StepReceived, MessageID: fmt.Sprintf("c%d", i)})
		}()
		waitQueued(t, s, i+1)
	}
	release()
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			t.Errorf("request %d succeeded in a batch that did not commit", i)
		}
	}
	for i := range 2 {
		if got := auditCount(t, s, fmt.Sprintf("c%d", i)); got != 0 {
			t.Errorf("c%d: %d rows on disk after a failed batch", i, got)
		}
	}
	// The writer goes on.
	if err := s.Audit().Write(ctx, audit.Record{Step: audit.StepReceived, MessageID: "after"}); err != nil {
		t.Fatal(err)
	}
}

// TestGroupCommitClose: writes after Close fail as unavailable, writes
// queued before it run.
func TestGroupCommitClose(t *testing.T) {
	s := openInternal(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	err := s.Audit().Write(context.Background(), audit.Record{Step: audit.StepReceived})
	if !errors.Is(err, dedup.ErrUnavailable) {
		t.Fatalf("write after close: %v, want ErrUnavailable", err)
	}
}

package inbox

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestDirSyncIsShared: concurrent handlers share directory syncs, and each
// returns only after a sync that started after its call finished; a failed
// sync fails the callers it was to cover, and the next callers sync anew.
func TestDirSyncIsShared(t *testing.T) {
	type span struct{ start, end time.Time }
	var (
		mu    sync.Mutex
		syncs []span
		fail  atomic.Bool
	)
	s := &dirSyncer{dirs: map[string]*dirSync{}, fsync: func(string) error {
		st := time.Now()
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		syncs = append(syncs, span{st, time.Now()})
		mu.Unlock()
		if fail.Load() {
			return errors.New("disk gone")
		}
		return nil
	}}
	const callers = 64
	calls := make([]span, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i%8) * time.Millisecond)
			calls[i].start = time.Now()
			if err := s.sync("d"); err != nil {
				t.Error(err)
			}
			calls[i].end = time.Now()
		}()
	}
	wg.Wait()
	if len(syncs) >= callers/2 {
		t.Errorf("%d syncs for %d concurrent callers: not shared", len(syncs), callers)
	}
	for i, c := range calls {
		covered := false
		for _, sy := range syncs {
			if !sy.start.Before(c.start) && !sy.end.After(c.end) {
				covered = true
			}
		}
		if !covered {
			t.Errorf("caller %d returned without a sync that started after its call", i)
		}
	}

	fail.Store(true)
	if err := s.sync("d"); err == nil {
		t.Error("a failed sync was not reported")
	}
	fail.Store(false)
	n := len(syncs)
	if err := s.sync("d"); err != nil || len(syncs) != n+1 {
		t.Errorf("after a failure: %v, %d new syncs", err, len(syncs)-n)
	}
}

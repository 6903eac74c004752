package inbox

import (
	"fmt"
	"os"
	"sync"
)

// dirSyncs shares the fsync of a partner's directory between the handlers
// that wrote to it at the same time (group sync): each returns once a sync
// of the directory that started after its call has succeeded, so its new
// names are durable, and one fsync covers every handler that was waiting
// while the previous one ran. A failed sync fails every handler it was to
// cover.
var dirSyncs = &dirSyncer{dirs: map[string]*dirSync{}, fsync: fsyncDir}

type dirSyncer struct {
	mu    sync.Mutex
	dirs  map[string]*dirSync
	fsync func(dir string) error
}

type dirSync struct {
	cond *sync.Cond
	// started and finished number the syncs; running: one is under way.
	started, finished uint64
	running           bool
	// failed is the number of the last sync that failed, with its error.
	failed    uint64
	failedErr error
}

// sync returns once a sync of dir that started after the call is done.
func (s *dirSyncer) sync(dir string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dirs[dir]
	if d == nil {
		d = &dirSync{cond: sync.NewCond(&s.mu)}
		s.dirs[dir] = d
	}
	need := d.started + 1 // a sync running now may have missed our names
	for {
		switch {
		case d.failed >= need:
			return d.failedErr
		case d.finished >= need:
			return nil
		case d.running:
			d.cond.Wait()
			continue
		}
		d.running = true
		d.started++
		seq := d.started
		s.mu.Unlock()
		err := s.fsync(dir)
		s.mu.Lock()
		d.running, d.finished = false, seq
		if err != nil {
			d.failed, d.failedErr = seq, err
		}
		d.cond.Broadcast()
	}
}

func syncDir(dir string) error { return dirSyncs.sync(dir) }

func fsyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("inbox: sync %s: %w", dir, err)
	}
	return nil
}

// Package migrate reads versioned SQL migrations from an embedded file
// system. The SQL stores apply them; this package only names and orders them.
package migrate

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one versioned SQL file, named NNNN_description.sql.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Load returns the *.sql files of dir in fsys ordered by version. Versions
// must start at 1 and have no gaps or repeats, so that a renamed or missing
// file cannot be skipped silently.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migrate: %s: name must be NNNN_description.sql", e.Name())
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
		out = append(out, Migration{Version: v, Name: strings.TrimSuffix(e.Name(), ".sql"), SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migrate: %s: expected version %d (versions start at 1 without gaps or repeats)", m.Name, i+1)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("migrate: no migrations in %s", dir)
	}
	return out, nil
}

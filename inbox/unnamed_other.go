//go:build !linux

package inbox

import "os"

// openUnnamed: only Linux has O_TMPFILE; elsewhere the caller uses a named
// temporary file.
func openUnnamed(string) (*os.File, error) { return nil, nil }

func linkUnnamed(*os.File, string) error { return errNoLink }

//go:build race

package readahead

// raceEnabled: under the race detector sync.Pool drops items at random.
const raceEnabled = true

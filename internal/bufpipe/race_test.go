//go:build race

package bufpipe

// raceEnabled: under the race detector sync.Pool drops items at random.
const raceEnabled = true

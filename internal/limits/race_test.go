//go:build race

package limits

// raceEnabled: the race detector drops sync.Pool items at random, so the
// allocation bounds of pooled buffers are not checked under it.
const raceEnabled = true

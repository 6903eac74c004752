//go:build !race

package bufpipe

const raceEnabled = false

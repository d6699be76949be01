//go:build race

package proc

// raceEnabled: a race-detector binary sleeps a second at exit unless told
// not to, which a supervisor, re-executed from such a binary, must not do.
const raceEnabled = true

//go:build race

package storerun

// raceEnabled: the race detector slows the cell down too much for its
// timing to compare with the simulator's at the test's compression.
const raceEnabled = true

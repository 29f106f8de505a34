//go:build !race

package storerun

const raceEnabled = false

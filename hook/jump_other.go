//go:build !amd64 && !arm64

package hook

// jumpSize is 0 where the agent has not been measured: Install refuses to
// patch anything there.
const jumpSize = 0

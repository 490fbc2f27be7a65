//go:build race

package redisbatch

// raceSlowdown is how many times slower the race detector runs the
// differential's scripts (on miniredis's Lua interpreter): its quick size
// is that much smaller under it, so that it takes about as long.
const raceSlowdown = 5

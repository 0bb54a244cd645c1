// Package commitstat counts the group commits of the durable Stores and
// the consumer transitions they carry, for examples/bench to report how
// many transitions one synced commit serves. It is process-wide, so that
// several Stores in one process, as the bench's instances, add up.
package commitstat

import "sync/atomic"

var commits, transitions atomic.Int64

// Committed records one commit that made n transitions durable.
func Committed(n int) {
	commits.Add(1)
	transitions.Add(int64(n))
}

// Read returns the commits and the transitions recorded so far.
func Read() (commitCount, transitionCount int64) {
	return commits.Load(), transitions.Load()
}

// Package mockclock is benbjohnson/clock's Mock with an Add that does not
// leave a timer due and unfired, for tests.
//
// clock.Mock.Add fires the timers due by the new time one at a time, each at
// its own time, and sets the new time last. A goroutine that one of those
// timers woke may re-arm a timer, from the time it was woken at, after Add
// has last looked at its timers and before the new time is set. That timer
// is then due and unfired, and a mock fires timers only when it is moved: a
// test that waits for what the timer would do waits for ever, though a real
// clock would have fired it at once. The engine's scheduler re-arms its one
// timer that way.
package mockclock

import (
	"time"

	"github.com/benbjohnson/clock"
)

// settleRounds is how many times Set looks again at the timers once the new
// time is set. A timer left due can only be armed while the time is behind
// the new one: during the first look, or during a later one that fired such
// a timer and so took the time back to that timer's own. A look that fires
// nothing arms nothing. Each look ends with a millisecond's sleep (the
// Mock's), in which the goroutines it woke re-arm.
const settleRounds = 2

// Clock is a clock.Mock whose Add and Set fire the timers that goroutines
// woken during the move re-armed for a time the move has passed.
//
// It does not probe for such timers with a timer of its own: a timer due at
// once can be fired twice by a Mock, from two goroutines creating timers at
// the same moment, and the second send on its channel then blocks with the
// Mock's lock held.
type Clock struct {
	*clock.Mock
}

// New returns a Clock at the Unix epoch, as clock.NewMock does.
func New() *Clock {
	return &Clock{Mock: clock.NewMock()}
}

// Add moves the time forward by d.
func (c *Clock) Add(d time.Duration) {
	c.Set(c.Mock.Now().Add(d))
}

// Set moves the time to t, firing every timer due by t at its own time.
func (c *Clock) Set(t time.Time) {
	for range 1 + settleRounds {
		c.Mock.Set(t)
	}
}

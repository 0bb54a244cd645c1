// Package mockclock is benbjohnson/clock's Mock with two of its hangs fixed,
// for tests.
//
// First, clock.Mock.Add fires the timers due by the new time one at a time,
// each at its own time, and sets the new time last. A goroutine that one of
// those timers woke may re-arm a timer, from the time it was woken at, after
// Add has last looked at its timers and before the new time is set. That
// timer is then due and unfired, and a mock fires timers only when it is
// moved: a test that waits for what the timer would do waits for ever, though
// a real clock would have fired it at once. The engine's scheduler re-arms its
// one timer that way.
//
// Second, a Mock fires a timer by picking the earliest under its lock, then
// sending on the timer's channel under the lock taken again. Moving the clock
// and creating a timer both fire timers that way, so a goroutine creating a
// timer while a test moves the clock can fire the same timer a second time.
// That send finds the timer's one slot full and blocks with the Mock's lock
// held, and every goroutine that reads the clock then waits for ever.
package mockclock

import (
	"sync"
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
// woken during the move re-armed for a time the move has passed, and which
// never fires a timer twice.
type Clock struct {
	*clock.Mock

	// firing lets one caller at a time fire the Mock's timers: Set, or a
	// new timer's creation.
	firing sync.Mutex
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
	c.firing.Lock()
	defer c.firing.Unlock()
	for range 1 + settleRounds {
		c.Mock.Set(t)
	}
}

// Timer creates a timer that fires once d has passed since the call. A move
// it waited for may have passed that time already: the timer then fires at
// once. As the Mock's does, its creation fires any timer due; unlike the
// Mock's, it leaves the time where it was.
func (c *Clock) Timer(d time.Duration) *clock.Timer {
	due := c.Mock.Now().Add(d)
	c.firing.Lock()
	defer c.firing.Unlock()
	now := c.Mock.Now()
	t := c.Mock.Timer(max(due.Sub(now), 0))
	// The Mock fired the earliest due timer at that timer's own time, and
	// may have left more due: fire them, and go back to now.
	if c.Mock.Now().Before(now) {
		c.Mock.Set(now)
	}
	return t
}

// After returns the channel of a new timer of d.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	return c.Timer(d).C
}

// Sleep waits until the clock has moved d.
func (c *Clock) Sleep(d time.Duration) {
	<-c.After(d)
}

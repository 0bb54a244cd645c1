// Package mockclock is benbjohnson/clock's Mock with an Add that leaves no
// timer due and unfired, for tests.
//
// clock.Mock.Add fires the timers due by the new time one at a time, at each
// timer's own time, and sets the new time last. A goroutine that one of
// those timers woke may re-arm a timer, from the time it was woken at, after
// Add has last looked at its timers and before the new time is set. That
// timer is then due but unfired, and a mock fires timers only when it is
// moved: a test that waits for what the timer would do waits for ever,
// though a real clock would have fired it at once. The engine's scheduler
// re-arms its one timer that way.
package mockclock

import (
	"time"

	"github.com/benbjohnson/clock"
)

// Clock is a clock.Mock whose Add and Set fire, before they return, every
// timer due by the new time, including the ones re-armed while they ran.
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

// Set moves the time to t.
func (c *Clock) Set(t time.Time) {
	c.Mock.Set(t)
	for c.fireLeftover(t) {
	}
}

// fireLeftover fires the timers that are due at t but unfired, at their own
// times as Set would have, and reports whether it found any.
//
// The probe is a timer due now; creating it fires the earliest due timer.
// If that is the probe, nothing earlier is due, and Set fires any timer due
// at exactly t. Otherwise an earlier timer fired and took the time back to
// its own, and Set fires the rest and sets t again. A goroutine woken here
// re-arms from the time it was woken at, so the caller probes again.
func (c *Clock) fireLeftover(t time.Time) bool {
	probe := c.Mock.Timer(0)
	var clear bool
	select {
	case <-probe.C:
		clear = true
	default:
		probe.Stop()
	}
	c.Mock.Set(t)
	return !clear
}

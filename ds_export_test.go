package webhooks

import "time"

// DSSchedulerParked reports whether e's __ds scheduler waits for work,
// its timer, if any, armed after the clock's time and no kick pending: it
// acts again only when the clock passes its timer or something pokes it.
func DSSchedulerParked(e *Engine) bool {
	d := e.ds
	d.parkMu.Lock()
	defer d.parkMu.Unlock()
	return d.parked && (d.armed.IsZero() || d.armed.After(e.clock.Now()))
}

// DSSendsRunning is how many __ds wakes e has started sending and not
// finished with: the pipeline's attempts, which are all __ds ones where no
// seed-001 consumer is woken.
func DSSendsRunning(e *Engine) int64 { return e.pipeline.attempts.Load() }

// DSSchedulerIdle reports whether e's __ds scheduler is parked and no wake
// is being sent, and the time its timer is set for (zero if none): the
// engine then waits only for its clock, or for a poke.
func DSSchedulerIdle(e *Engine) (armed time.Time, idle bool) {
	if !DSSchedulerParked(e) || DSSendsRunning(e) > 0 {
		return time.Time{}, false
	}
	d := e.ds
	d.parkMu.Lock()
	defer d.parkMu.Unlock()
	return d.armed, true
}

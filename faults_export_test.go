package webhooks

// FaultSlotsInUse reports how many delivery attempts are waiting in their
// host's lane, in flight, or recording their outcome. Fault tests check
// that every fault gives its slot back and has its outcome applied. An
// attempt holds its lane's slot from its start until its POST is
// answered, and counts in the pipeline's attempts from just after its
// start until its outcome is recorded: either count is zero only when
// nothing runs.
func FaultSlotsInUse(e *Engine) int {
	p := e.pipeline
	ls := p.lanes
	ls.mu.Lock()
	waiting := 0
	for _, l := range ls.byKey {
		waiting += len(l.waiting)
	}
	inFlight := ls.inFlight
	ls.mu.Unlock()
	return waiting + max(inFlight, int(p.attempts.Load()))
}

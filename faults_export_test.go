package webhooks

// FaultSlotsInUse reports how many delivery attempts are in flight or
// waiting in their host's lane. Fault tests check that every fault gives
// its slot back.
func FaultSlotsInUse(e *Engine) int { return e.pipeline.lanes.pending() }

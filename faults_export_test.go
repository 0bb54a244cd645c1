package webhooks

// FaultSlotsInUse reports how many delivery slots are taken, which is how
// many webhook POSTs are in flight. Fault tests check that every fault
// gives its slot back.
func FaultSlotsInUse(e *Engine) int { return len(e.slots) }

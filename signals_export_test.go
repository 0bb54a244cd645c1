package webhooks

// SignalProgress makes e send on ch after each write of consumers it makes
// to its Store and after each delivery attempt it ends, so that a test
// waits for their effects without polling. Call it before Start.
func SignalProgress(e *Engine, ch chan<- struct{}) { e.progressed.Set(ch) }

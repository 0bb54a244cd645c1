package webhooks

import "context"

// Part is one of the engine's background parts.
type Part interface {
	Start(ctx context.Context)
	Stop()
}

// Parts are e's background parts by name, each with its own Start and
// Stop.
func Parts(e *Engine) map[string]Part {
	return map[string]Part{
		"scheduler": e.sched, "sweep": e.sweep, "feed": e.feed, "pipeline": e.pipeline,
		"outcomes": e.outcomes, "keys": e.keys, "metrics": e.metrics, "verifier": e.verifier,
		"ds": e.ds,
	}
}

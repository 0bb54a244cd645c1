package webhooks

import "context"

// SignalChallengesChecked makes e send on ch after each pass of its
// verifier over the challenges due. Call it before Start.
func SignalChallengesChecked(e *Engine, ch chan<- struct{}) { e.signals.challengesChecked.Set(ch) }

// ChallengeTick is how often an engine looks for challenges due.
const ChallengeTick = challengeTick

// Challenge has e claim and send the challenge of subscription id if the
// Store says it is due, whatever e's own view of it.
func Challenge(e *Engine, id string) error { return e.challenge(context.Background(), id) }

package webhooks

import "time"

// LeaseRenewal is how often e renews its metrics lease.
func LeaseRenewal(e *Engine) time.Duration { return e.metrics.renewal }

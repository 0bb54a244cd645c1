package webhooks

import "net/http"

// ClientErrorPolicy says which 4xx responses to a delivery are retried. A
// 4xx that is not retried is permanent: the delivery gives up at once, as
// when it has had every attempt (RetryPolicy.OnExhausted). 410 Gone
// disables the subscription whatever the policy.
type ClientErrorPolicy string

const (
	// RetryClientErrors retries every 4xx as a 5xx is retried. It is the
	// default, and the engine's behaviour before the option existed.
	RetryClientErrors ClientErrorPolicy = "retry"
	// RetryTransientClientErrors retries only 408 Request Timeout and 429
	// Too Many Requests; any other 4xx is permanent (seed 002).
	RetryTransientClientErrors ClientErrorPolicy = "transient"
	// FailClientErrors makes every 4xx permanent (seed 004).
	FailClientErrors ClientErrorPolicy = "fail"
)

// ExhaustedAction says what a consumer does once a delivery has had every
// attempt, or all the time, its retry policy allows, or met a permanent
// failure.
type ExhaustedAction string

const (
	// ExhaustedStop makes the consumer a dead letter (StateFailed): its
	// cursor stays before the failed delivery until Engine.ResumeConsumer
	// or a rewind. It is the default.
	ExhaustedStop ExhaustedAction = "stop"
	// ExhaustedSkip records an event-push batch as a skipped dead letter
	// on its consumer (Consumer.Skipped: its offsets, attempts and last
	// error) and moves the cursor past it, so that the stream goes on. A
	// rewind to the record's From delivers the batch again. A consumer
	// that already holds MaxSkippedBatches records, or whose batch's end
	// is not known (its last attempt was lost with its engine), stops as
	// with ExhaustedStop instead: nothing is skipped without a record.
	// Wake subscriptions cannot skip: a wake carries no batch to record,
	// and its consumer reads the streams itself.
	ExhaustedSkip ExhaustedAction = "skip"
)

// permanent reports whether failure f ends its delivery at once under p.
func (p RetryPolicy) permanent(f *deliveryFailure) bool {
	if f.class != failStatus4xx {
		return false
	}
	switch p.ClientErrors {
	case FailClientErrors:
		return true
	case RetryTransientClientErrors:
		return f.status != http.StatusRequestTimeout && f.status != http.StatusTooManyRequests
	default:
		return false
	}
}

// skips reports whether a consumer under p skips what it gives up on.
func (p RetryPolicy) skips() bool { return p.OnExhausted == ExhaustedSkip }

package webhooks

// The failure log's bound, for the tests over HTTP.
const (
	FailureLogBurst = failureLogBurst
	FailureLogEvery = failureLogEvery
)

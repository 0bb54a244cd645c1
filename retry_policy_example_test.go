package webhooks_test

import (
	"context"
	"fmt"
	"time"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
)

// A subscription that treats a 4xx other than 408 and 429 as permanent,
// and that skips a batch that failed for good rather than stop its
// stream: the skipped batch stays on its consumer (Consumer.Skipped), and
// rewinding to its From delivers it again.
func ExampleRetryPolicy_skip() {
	ctx := context.Background()
	engine, err := webhooks.New(memstore.New(), &eventSource{streams: map[string][]string{}},
		webhooks.WithCallbackBaseURL("https://streams.example.com"))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := engine.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = engine.Stop(ctx) }()
	sub, err := engine.CreateSubscription(ctx, &webhooks.Subscription{
		ID:       "orders",
		Pattern:  "/orders/*",
		Webhook:  "https://hooks.example.com/orders",
		Delivery: webhooks.DeliveryEvents,
		Events:   &webhooks.EventsOptions{MaxBatchEvents: 100, MaxBatchBytes: 1 << 20, Timeout: 10 * time.Second},
		Retry: &webhooks.RetryPolicy{
			Schedule:     []time.Duration{time.Second, time.Minute},
			MaxAttempts:  5,
			ClientErrors: webhooks.RetryTransientClientErrors,
			OnExhausted:  webhooks.ExhaustedSkip,
		},
	}, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(sub.Retry.ClientErrors, sub.Retry.OnExhausted)
	// Output: transient skip
}

package webhooks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/receiver"
)

// Operating a subscription from Go: pause it while its receiver moves,
// resume it, replay a stream from its start, and look at its consumers.
// Each call has a route in the subscription API too.
func Example_operations() {
	ctx := context.Background()
	batches := make(chan receiver.EventsPayload, 4)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p receiver.EventsPayload
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &p)
		batches <- p
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()
	next := func() {
		select {
		case p := <-batches:
			fmt.Printf("batch of %d events from %s\n", len(p.Events), p.FirstOffset)
		case <-time.After(10 * time.Second):
			fmt.Println("no batch")
		}
	}

	source := &eventSource{streams: map[string][]string{}}
	e, err := webhooks.New(memstore.New(), source,
		webhooks.WithCallbackBaseURL("http://streams.example.com"),
		webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := e.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = e.Stop(ctx) }()
	exampleRequest(e.SubscriptionHandler(), http.MethodPut, "/orders/*?subscription=orders",
		fmt.Sprintf(`{"webhook":%q,"delivery":"events","batch":{"max_wait_ms":0}}`, receiver.URL))

	sub, _ := e.PauseSubscription(ctx, "orders")
	fmt.Println("status:", sub.Status)
	source.mu.Lock()
	source.streams["/orders/eu"] = []string{`{"id":1}`, `{"id":2}`, `{"id":3}`}
	source.mu.Unlock()
	_ = e.StreamCreated(ctx, "/orders/eu") // a paused subscription sends nothing

	sub, _ = e.ResumeSubscription(ctx, "orders")
	fmt.Println("status:", sub.Status)
	next()

	n, _ := e.Rewind(ctx, &webhooks.RewindParams{SubscriptionID: "orders", Offset: webhooks.OffsetNone})
	fmt.Println("rewound:", n)
	next()

	consumers, _ := e.ListConsumers(ctx, &webhooks.ListConsumersParams{SubscriptionID: "orders", Limit: 10})
	for _, c := range consumers {
		fmt.Println("consumer of", c.PrimaryStream)
	}
	// Output:
	// status: paused
	// status: active
	// batch of 3 events from -1
	// rewound: 1
	// batch of 3 events from -1
	// consumer of /orders/eu
}

package memstore_test

import (
	"context"
	"fmt"
	"time"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
)

func Example() {
	ctx := context.Background()
	s := memstore.New()
	_ = s.CreateSubscription(ctx, &webhooks.Subscription{ID: "orders", Pattern: "/orders/*", Webhook: "https://example.com/hook"})

	id := webhooks.ConsumerID("orders", "/orders/42")
	_ = s.CreateConsumer(ctx, &webhooks.Consumer{
		ID:             id,
		SubscriptionID: "orders",
		PrimaryStream:  "/orders/42",
		State:          webhooks.StateIdle,
		Streams:        []webhooks.StreamOffset{{Path: "/orders/42", Offset: webhooks.OffsetNone}},
	})

	// Wake the consumer: one atomic read-modify-write.
	deadline := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	c, err := s.UpdateConsumer(ctx, id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		c.State = webhooks.StateWaking
		c.Epoch++
		c.Deadline = deadline
		return webhooks.UpdateSave, nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c.State, c.Epoch)

	due, _ := s.DueConsumers(ctx, deadline, 10)
	fmt.Println(len(due), due[0].ID)

	// Deleting the subscription deletes its consumers with it.
	_ = s.DeleteSubscription(ctx, "orders")
	_, err = s.GetConsumer(ctx, id)
	fmt.Println(err)
	// Output:
	// WAKING 1
	// 1 orders:%2Forders%2F42
	// webhooks: consumer not found
}

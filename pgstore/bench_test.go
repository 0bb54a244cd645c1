package pgstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
)

// BenchmarkUpdateConsumer measures one state transition, a wake-like
// UpdateConsumer that saves, in the memory store and in PostgreSQL, as
// sqlitestore's benchmark of the same name does. The parallel variant
// spreads calls over many consumers, as concurrent callbacks do.
func BenchmarkUpdateConsumer(b *testing.B) {
	ctx := context.Background()
	const n = 1024
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = webhooks.ConsumerID("s", fmt.Sprintf("/stream/%d", i))
	}
	wake := func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		c.Epoch++
		c.State = webhooks.StateWaking
		c.Deadline = t0.Add(time.Duration(c.Epoch) * time.Second)
		return webhooks.UpdateSave, nil
	}
	for _, store := range []struct {
		name string
		open func(b *testing.B) webhooks.Store
	}{
		{"memory", func(*testing.B) webhooks.Store { return memstore.New() }},
		{"postgres", func(b *testing.B) webhooks.Store { return newStore(b) }},
	} {
		b.Run("store="+store.name, func(b *testing.B) {
			s := store.open(b)
			require.NoError(b, s.CreateSubscription(ctx, &webhooks.Subscription{ID: "s", Pattern: "/**", Webhook: "https://example.com/s"}))
			for i, id := range ids {
				path := fmt.Sprintf("/stream/%d", i)
				require.NoError(b, s.CreateConsumer(ctx, &webhooks.Consumer{
					ID: id, SubscriptionID: "s", PrimaryStream: path, State: webhooks.StateIdle,
					Streams: []webhooks.StreamOffset{{Path: path, Offset: webhooks.OffsetNone}}, CreatedAt: t0, UpdatedAt: t0,
				}))
			}
			b.Run("serial", func(b *testing.B) {
				i := 0
				for b.Loop() {
					if _, err := s.UpdateConsumer(ctx, ids[i%n], wake); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
			b.Run("parallel", func(b *testing.B) {
				b.SetParallelism(16) // concurrent requests, not cores
				b.RunParallel(func(pb *testing.PB) {
					i := rand.IntN(n)
					for pb.Next() {
						if _, err := s.UpdateConsumer(ctx, ids[i%n], wake); err != nil {
							b.Error(err)
							return
						}
						i++
					}
				})
			})
		})
	}
}

package storetest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// BenchmarkListConsumers measures ListConsumers pages of 100 over one
// subscription of 100,000 consumers, one in ten of them FAILED: the first
// page and a late one, with and without a state filter. A Store that
// answers from an index costs about the same for both.
func BenchmarkListConsumers(b *testing.B, s webhooks.Store) {
	const n, limit, workers = 100_000, 100, 32
	require.NoError(b, s.CreateSubscription(b.Context(), newSub("s")))
	// Many writers at once, so that a store which groups commits makes
	// few of them.
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				c := newConsumer("s", fmt.Sprintf("/tenants/%07d/events", i))
				if i%10 == 0 {
					c.State = webhooks.StateFailed
				}
				if err := s.CreateConsumer(b.Context(), c); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// The tenths are FAILED, so the late page of them starts as late.
	late := webhooks.ConsumerID("s", fmt.Sprintf("/tenants/%07d/events", n-10*limit-10))
	for _, bc := range []struct {
		name  string
		state webhooks.ConsumerState
		after string
	}{
		{"first", "", ""},
		{"late", "", late},
		{"failed/first", webhooks.StateFailed, ""},
		{"failed/late", webhooks.StateFailed, late},
	} {
		b.Run("page="+bc.name, func(b *testing.B) {
			p := &webhooks.ListConsumersParams{SubscriptionID: "s", State: bc.state, After: bc.after, Limit: limit}
			b.ReportAllocs()
			for b.Loop() {
				cs, err := s.ListConsumers(b.Context(), p)
				if err != nil {
					b.Fatal(err)
				}
				if len(cs) != limit {
					b.Fatalf("got %d consumers, want %d", len(cs), limit)
				}
			}
		})
	}
}

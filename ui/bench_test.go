package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
)

// countingStore counts the reads that a page or a live read makes: those
// made within a context marked by counted, not the engine's own (a feed
// reload, a delivery), which may run at any time on a loaded machine.
type countingStore struct {
	*memstore.Store
	reads atomic.Int64
}

type countedKey struct{}

// counted marks ctx as a request whose reads count.
func counted(ctx context.Context) context.Context { return context.WithValue(ctx, countedKey{}, true) }

func (s *countingStore) count(ctx context.Context) {
	if ctx.Value(countedKey{}) != nil {
		s.reads.Add(1)
	}
}

func (s *countingStore) GetSubscription(ctx context.Context, id string) (*webhooks.Subscription, error) {
	s.count(ctx)
	return s.Store.GetSubscription(ctx, id)
}

func (s *countingStore) ListSubscriptions(ctx context.Context) ([]*webhooks.Subscription, error) {
	s.count(ctx)
	return s.Store.ListSubscriptions(ctx)
}

func (s *countingStore) GetConsumer(ctx context.Context, id string) (*webhooks.Consumer, error) {
	s.count(ctx)
	return s.Store.GetConsumer(ctx, id)
}

func (s *countingStore) ListConsumers(ctx context.Context, p *webhooks.ListConsumersParams) ([]*webhooks.Consumer, error) {
	s.count(ctx)
	return s.Store.ListConsumers(ctx, p)
}

// addConsumers gives subscription id n more IDLE consumers.
func addConsumers(tb testing.TB, f *fixture, id string, n int) {
	tb.Helper()
	for i := range n {
		path := fmt.Sprintf("/%s/many-%06d", id, i)
		require.NoError(tb, f.store.CreateConsumer(context.Background(), &webhooks.Consumer{ID: webhooks.ConsumerID(id, path),
			SubscriptionID: id, PrimaryStream: path, State: webhooks.StateIdle,
			Streams: []webhooks.StreamOffset{{Path: path, Offset: webhooks.OffsetNone}}}))
	}
}

// TestLiveReadsAreBounded checks what one refresh of a page costs the
// Store: six reads of the subscription page's live data, two of the
// consumer page's, however many consumers there are; counts stop at 1000.
func TestLiveReadsAreBounded(t *testing.T) {
	var cs *countingStore
	f := newFixtureOn(t, func(s *memstore.Store) webhooks.Store {
		cs = &countingStore{Store: s}
		return cs
	})
	f.requestCtx = counted(t.Context())
	reads := func(target string) int64 {
		t.Helper()
		before := cs.reads.Load()
		f.get(target)
		return cs.reads.Load() - before
	}
	sub := url.Values{"id": {"wake-active"}}.Encode()
	consumer := url.Values{"id": {webhooks.ConsumerID("wake-active", "/wake-active/s0")}}.Encode()
	few := reads("/ui/subscription/live?" + sub)
	assert.Equal(t, int64(6), few)
	assert.Equal(t, int64(2), reads("/ui/consumer/live?"+consumer))

	addConsumers(t, f, "wake-active", 1500)
	assert.Equal(t, few, reads("/ui/subscription/live?"+sub))
	assert.Contains(t, f.get("/ui/subscription/live?"+sub), `"count/IDLE":"1000+"`)
	assert.True(t, strings.Contains(f.get("/ui/subscription?"+sub), `id="count-IDLE">1000&#43;<`), "the count is capped")
}

// BenchmarkConsumerPage renders the first and a late page of a
// subscription's 100,000 consumers; keyset paging makes them cost the
// same.
func BenchmarkConsumerPage(b *testing.B) {
	f := newFixture(b)
	const n = 100_000
	addConsumers(b, f, "wake-active", n)
	late := webhooks.ConsumerID("wake-active", fmt.Sprintf("/wake-active/many-%06d", n-1000))
	for _, bc := range []struct{ name, after string }{{"first", ""}, {"late", late}} {
		target := "/ui/subscription?" + url.Values{"id": {"wake-active"}, "after": {bc.after}}.Encode()
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if w := f.request(http.MethodGet, target, operatorToken, nil, nil); w.Code != http.StatusOK {
					b.Fatal(w.Code)
				}
			}
		})
	}
}

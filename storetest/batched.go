package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// Hold makes a Store's reads of one kind made from now on wait in its
// queue: queued returns once n of them wait, and release lets them run,
// together.
type Hold func(t *testing.T) (release func(), queued func(n int))

// RunBatchedReads checks a Store that batches the GetSubscription and the
// ConsumersByStream calls made at once, as pgstore and sqlitestore do.
// holdSubscriptions and holdStreams hold s's batches of each. Reads that
// share a batch must each get their own answer: their own copies when two
// ask the same, and not found or empty where there is nothing.
func RunBatchedReads(t *testing.T, s webhooks.Store, holdSubscriptions, holdStreams Hold) {
	ctx := t.Context()
	mustCreateSub(t, s, newSub("s"))
	mustCreate(t, s, newConsumer("s", "/a"), newConsumer("s", "/b"))

	t.Run("GetSubscription", func(t *testing.T) {
		type answer struct {
			sub *webhooks.Subscription
			err error
		}
		outs := batched(t, holdSubscriptions, []string{"s", "missing", "s"}, func(id string) answer {
			sub, err := s.GetSubscription(ctx, id)
			return answer{sub, err}
		})
		first, missing, second := outs[0], outs[1], outs[2]
		require.NoError(t, first.err)
		requireSub(t, newSub("s"), first.sub)
		require.ErrorIs(t, missing.err, webhooks.ErrSubscriptionNotFound)
		require.NoError(t, second.err)
		require.Equal(t, first.sub, second.sub)
		require.NotSame(t, first.sub, second.sub, "each caller owns its copy")
	})

	t.Run("ConsumersByStream", func(t *testing.T) {
		type answer struct {
			cs  []*webhooks.Consumer
			err error
		}
		outs := batched(t, holdStreams, []string{"/a", "/none", "/b", "/a"}, func(path string) answer {
			cs, err := s.ConsumersByStream(ctx, path)
			return answer{cs, err}
		})
		for _, out := range outs {
			require.NoError(t, out.err)
		}
		a, none, b, again := outs[0], outs[1], outs[2], outs[3]
		require.Equal(t, []string{webhooks.ConsumerID("s", "/a")}, ids(a.cs))
		require.Empty(t, none.cs)
		require.Equal(t, []string{webhooks.ConsumerID("s", "/b")}, ids(b.cs))
		require.Equal(t, a.cs, again.cs)
		require.NotSame(t, a.cs[0], again.cs[0], "each caller owns its copy")
	})
}

// batched makes a read of each key while hold holds the batch, so that
// they share the next one, and returns their answers in key order.
func batched[A any](t *testing.T, hold Hold, keys []string, read func(key string) A) []A {
	t.Helper()
	release, queued := hold(t)
	outs := make([]chan A, len(keys))
	for i, key := range keys {
		outs[i] = make(chan A, 1)
		go func() { outs[i] <- read(key) }()
		queued(i + 1)
	}
	release()
	answers := make([]A, len(keys))
	for i, out := range outs {
		answers[i] = <-out
	}
	return answers
}

package pgstore

import (
	"testing"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/combine/combinetest"
)

// TestReadsShareOneQuery queues reads of one kind behind a held one: they
// run as one query on one connection, and each caller gets its own
// answer: its own copies when two ask the same, and not found or empty
// where there is nothing.
func TestReadsShareOneQuery(t *testing.T) {
	s := newStore(t)
	consumers(t, s, "/a", "/b")
	ctx := t.Context()

	t.Run("GetSubscription", func(t *testing.T) {
		release, queued := combinetest.Hold(t, &s.subscriptionReads, &subscriptionRead{ctx: ctx})
		acquired := s.pool.Stat().AcquireCount()
		type answer struct {
			sub *webhooks.Subscription
			err error
		}
		var outs []chan answer
		for _, id := range []string{"s", "missing", "s"} {
			out := make(chan answer, 1)
			go func() {
				sub, err := s.GetSubscription(ctx, id)
				out <- answer{sub, err}
			}()
			outs = append(outs, out)
			queued(len(outs))
		}
		release()
		first, missing, second := <-outs[0], <-outs[1], <-outs[2]
		require.NoError(t, first.err)
		require.Equal(t, "https://example.com/s", first.sub.Webhook)
		require.ErrorIs(t, missing.err, webhooks.ErrSubscriptionNotFound)
		require.NoError(t, second.err)
		require.Equal(t, first.sub, second.sub)
		require.NotSame(t, first.sub, second.sub, "each caller owns its copy")
		require.EqualValues(t, 1, s.pool.Stat().AcquireCount()-acquired)
	})

	t.Run("ConsumersByStream", func(t *testing.T) {
		release, queued := combinetest.Hold(t, &s.streamReads, &streamRead{ctx: ctx})
		acquired := s.pool.Stat().AcquireCount()
		type answer struct {
			cs  []*webhooks.Consumer
			err error
		}
		var outs []chan answer
		for _, path := range []string{"/a", "/none", "/b", "/a"} {
			out := make(chan answer, 1)
			go func() {
				cs, err := s.ConsumersByStream(ctx, path)
				out <- answer{cs, err}
			}()
			outs = append(outs, out)
			queued(len(outs))
		}
		release()
		a, none, b, again := <-outs[0], <-outs[1], <-outs[2], <-outs[3]
		for _, ans := range []answer{a, none, b, again} {
			require.NoError(t, ans.err)
		}
		require.Len(t, a.cs, 1)
		require.Equal(t, webhooks.ConsumerID("s", "/a"), a.cs[0].ID)
		require.NotNil(t, none.cs)
		require.Empty(t, none.cs)
		require.Len(t, b.cs, 1)
		require.Equal(t, webhooks.ConsumerID("s", "/b"), b.cs[0].ID)
		require.Equal(t, a.cs, again.cs)
		require.NotSame(t, a.cs[0], again.cs[0], "each caller owns its copy")
		require.EqualValues(t, 1, s.pool.Stat().AcquireCount()-acquired)
	})
}

package webhooks_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/receiver"
)

// Liveness across instances (issue 27, L1): an acknowledged append always
// wakes its consumers, whatever fails on the way.

// flakySource is a fakeSource whose Stream fails, with an error that is
// neither ErrStreamNotFound nor ErrStoreUnavailable, while it is down: a
// dropped database connection of the host.
type flakySource struct {
	*fakeSource
	down atomic.Bool
}

// flakyDetail is in the source's error; clients must never see it.
const flakyDetail = "conn 10.0.0.7:5432 reset by peer"

func (s *flakySource) Stream(ctx context.Context, path string) (webhooks.StreamInfo, error) {
	if s.down.Load() {
		return webhooks.StreamInfo{}, errors.New(flakyDetail)
	}
	return s.fakeSource.Stream(ctx, path)
}

// requireRetryLater checks a 503 SERVICE_UNAVAILABLE with Retry-After
// that does not echo the source's error.
func requireRetryLater(t *testing.T, status int, header http.Header, body string) {
	t.Helper()
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	secs, err := strconv.Atoi(header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", header.Get("Retry-After"))
	require.Positive(t, secs)
	require.Contains(t, body, `"SERVICE_UNAVAILABLE"`)
	require.NotContains(t, body, flakyDetail)
}

// A stream read that fails is retried, never dropped: the append whose
// wake-up it failed is delivered once the source answers again, and the
// requests it failed meanwhile are answered 503 with Retry-After, as the
// docs say, not 500.
func TestFailedStreamReadIsRetried(t *testing.T) {
	src := &flakySource{}
	h := newHarnessWrapped(t, func(f *fakeSource) webhooks.StreamSource { src.fakeSource = f; return src })
	h.subscribe("s1", "/agents/*")
	h.create(agentA, 10)
	d := h.nextDelivery()
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })

	src.down.Store(true)
	for _, body := range []string{
		fmt.Sprintf(`{"epoch":1,"acks":[{"path":%q,"offset":%q}]}`, agentA, offset(10)),
		`{"epoch":1,"done":true}`,
	} {
		rec := h.do(http.MethodPost, "/callback/"+agentAID, body, "Authorization", "Bearer "+d.n.Token, "Content-Type", "application/json")
		requireRetryLater(t, rec.Code, rec.Header(), rec.Body.String())
	}
	rec := h.do(http.MethodGet, "/agents/*?subscription=s1&consumers", "")
	requireRetryLater(t, rec.Code, rec.Header(), rec.Body.String())

	src.down.Store(false)
	r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets(agentA, offset(10)), Done: true})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateIdle })

	src.down.Store(true)
	h.source.grow(agentA, 5)
	require.ErrorIs(t, h.engine.StreamAppended(context.Background(), agentA), webhooks.ErrStoreUnavailable)
	src.down.Store(false)
	h.waitIdle()
	h.clock.Add(testPollInterval)
	again := h.nextDelivery()
	require.Equal(t, agentAID, again.n.ConsumerID)
	require.Equal(t, []string{agentA}, again.n.TriggeredBy)
}

package inbox

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/mockclock"
)

// memStreams are JSON streams in memory, created on their first append,
// as WithDailyPartitions asks of a host, with the cursors of a processor's
// subscription.
type memStreams struct {
	mu      sync.Mutex
	streams map[string][][]byte
	cursors map[string]string
}

func newMemStreams() *memStreams {
	return &memStreams{streams: map[string][][]byte{}, cursors: map[string]string{}}
}

func memOffset(n int) string { return fmt.Sprintf("%020d", n) }

func (m *memStreams) Append(_ context.Context, stream string, record []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.streams[stream] = append(m.streams[stream], record)
	return nil
}

func (m *memStreams) ReadEvents(_ context.Context, path, from string, limit webhooks.ReadLimit) (webhooks.EventBatch, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	events, ok := m.streams[path]
	if !ok {
		return webhooks.EventBatch{}, webhooks.ErrStreamNotFound
	}
	pos := 0
	if from != webhooks.OffsetNone {
		var err error
		if pos, err = strconv.Atoi(from); err != nil || pos > len(events) {
			return webhooks.EventBatch{}, fmt.Errorf("no offset %q", from)
		}
	}
	end := len(events)
	if limit.MaxEvents > 0 {
		end = min(end, pos+limit.MaxEvents)
	}
	return webhooks.EventBatch{JSON: true, Events: events[pos:end], Next: memOffset(end), UpToDate: end == len(events)}, nil
}

func (m *memStreams) MatchStreams(_ context.Context, p *webhooks.Pattern) ([]webhooks.StreamInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []webhooks.StreamInfo
	for path, events := range m.streams {
		if p.Match(path) {
			out = append(out, webhooks.StreamInfo{Path: path, Tail: memOffset(len(events))})
		}
	}
	return out, nil
}

func (m *memStreams) Delete(_ context.Context, path string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.streams, path)
	return nil
}

func (m *memStreams) cursor(_ context.Context, stream string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.cursors[stream]; ok {
		return c, nil
	}
	return webhooks.OffsetNone, nil
}

// processAll moves the cursor of stream to its tail.
func (m *memStreams) processAll(stream string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cursors[stream] = memOffset(len(m.streams[stream]))
}

func (m *memStreams) paths() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for p := range m.streams {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// TestRetention: with daily partitions, a Sweep deletes a partition of
// records once all of it is processed and its day ended 7 days ago, and
// one of dead letters 30 days after its day; a partition with an
// unprocessed record stays whatever its age, and so does the old
// unpartitioned stream.
func TestRetention(t *testing.T) {
	ctx := context.Background()
	clk := mockclock.New()
	clk.Set(time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC))
	st := newMemStreams()
	providers := []Provider{{Name: "github", Scheme: GitHub{Secret: "s"}}}
	h, err := New(st, providers, WithClock(clk), WithDailyPartitions())
	require.NoError(t, err)
	p, err := NewProcessor(st, providers, WithClock(clk), WithDailyPartitions())
	require.NoError(t, err)
	require.NoError(t, st.Append(ctx, "/inbox/github/records", []byte(`{"provider":"github"}`)), "a data directory's old stream")

	require.Less(t, post(h, "/inbox/github", `{"n":1}`, "X-GitHub-Delivery", "d1").Code, 300)
	require.NoError(t, p.bury(ctx, p.providers["github"], &Record{Provider: "github", DeliveryID: "d1"}, "failed", nil))
	clk.Add(24 * time.Hour)
	require.Less(t, post(h, "/inbox/github", `{"n":2}`, "X-GitHub-Delivery", "d2").Code, 300)
	require.Equal(t, []string{"/inbox/github/dead/2026-01-01", "/inbox/github/records",
		"/inbox/github/records/2026-01-01", "/inbox/github/records/2026-01-02"}, st.paths())
	st.processAll("/inbox/github/records/2026-01-01")

	sweep := func() []string {
		deleted, err := p.Sweep(ctx, st, st.cursor, st, Retention{})
		require.NoError(t, err)
		return deleted
	}
	// 2026-01-01 ends at 01-02 00:00; kept 7 days from then.
	clk.Set(time.Date(2026, 1, 8, 23, 59, 59, 0, time.UTC))
	assert.Empty(t, sweep())
	clk.Add(time.Second)
	assert.Equal(t, []string{"/inbox/github/records/2026-01-01"}, sweep())

	// Long after: the dead letters go after 30 days; the unprocessed
	// partition and the old stream stay.
	clk.Set(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
	assert.Equal(t, []string{"/inbox/github/dead/2026-01-01"}, sweep())
	assert.Equal(t, []string{"/inbox/github/records", "/inbox/github/records/2026-01-02"}, st.paths())
	st.processAll("/inbox/github/records")
	assert.Empty(t, sweep(), "an unpartitioned stream is never deleted")

	// Processed, at last: it goes.
	st.processAll("/inbox/github/records/2026-01-02")
	assert.Equal(t, []string{"/inbox/github/records/2026-01-02"}, sweep())
	assert.Equal(t, []string{"/inbox/github/records"}, st.paths())
}

// TestPartitionsAreProcessedAndListed: the Processor takes a partition's
// records as its provider's, and an Admin lists the old unpartitioned
// stream's records and the partitions', in order, a page at a time.
func TestPartitionsAreProcessedAndListed(t *testing.T) {
	ctx := context.Background()
	clk := mockclock.New()
	clk.Set(time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC))
	st := newMemStreams()
	providers := []Provider{{Name: "github", Scheme: GitHub{Secret: "s"}}}
	h, err := New(st, providers, WithClock(clk), WithDailyPartitions())
	require.NoError(t, err)
	p, err := NewProcessor(st, providers, WithClock(clk), WithDailyPartitions())
	require.NoError(t, err)
	require.NoError(t, st.Append(ctx, "/inbox/github/records", []byte(`{"provider":"github","delivery_id":"d0"}`)))
	require.Less(t, post(h, "/inbox/github", `{"n":1}`, "X-GitHub-Delivery", "d1").Code, 300)
	clk.Add(24 * time.Hour)
	require.Less(t, post(h, "/inbox/github", `{"n":2}`, "X-GitHub-Delivery", "d2").Code, 300)
	st.processAll("/inbox/github/records")

	admin := p.Admin(st, st.cursor)
	var got []string
	from := ""
	for {
		page, err := admin.List(ctx, "github", StatusPending, from, 1)
		require.NoError(t, err)
		for _, e := range page.Entries {
			got = append(got, e.Record.DeliveryID+"@"+e.Stream)
		}
		if from = page.Next; from == "" {
			break
		}
	}
	assert.Equal(t, []string{"d1@/inbox/github/records/2026-01-01", "d2@/inbox/github/records/2026-01-02"}, got)
	page, err := admin.List(ctx, "github", StatusDone, "", 10)
	require.NoError(t, err)
	require.Len(t, page.Entries, 1)
	assert.Equal(t, "d0", page.Entries[0].Record.DeliveryID)

	// A partition's record reaches its handler; a bad signature is a dead
	// letter in today's partition of the dead-letter stream.
	raw := st.streams["/inbox/github/records/2026-01-02"][0]
	b := &webhooks.Batch{}
	b.Stream, b.Events, b.Attempt = "/inbox/github/records/2026-01-02", []json.RawMessage{raw}, 1
	require.NoError(t, p.HandleBatch(ctx, b))
	dead, err := admin.List(ctx, "github", StatusDead, "", 10)
	require.NoError(t, err)
	require.Len(t, dead.Entries, 1)
	assert.Equal(t, "/inbox/github/dead/2026-01-02", dead.Entries[0].Stream)
	assert.Equal(t, "d2", dead.Entries[0].Record.DeliveryID)
	require.NoError(t, admin.Replay(ctx, "github", "d2"))
	assert.Len(t, st.streams["/inbox/github/records/2026-01-02"], 2, "replayed into today's partition")
}

package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/inbox"
	"github.com/streamhooks/webhooks/ui"
)

// streams are JSON streams in memory: an inbox's Appender and the
// screen's EventReader. An offset is the index of the next event.
type streams struct {
	mu sync.Mutex
	m  map[string][][]byte
}

func (s *streams) Append(_ context.Context, stream string, record []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[stream] = append(s.m[stream], record)
	return nil
}

func (s *streams) ReadEvents(_ context.Context, path, from string, limit webhooks.ReadLimit) (webhooks.EventBatch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := 0
	if from != webhooks.OffsetNone {
		var err error
		if i, err = strconv.Atoi(from); err != nil {
			return webhooks.EventBatch{}, err
		}
	}
	evs := s.m[path][min(i, len(s.m[path])):]
	evs = evs[:min(len(evs), limit.MaxEvents)]
	next := i + len(evs)
	return webhooks.EventBatch{JSON: true, Events: evs, Next: fmt.Sprintf("%020d", next), UpToDate: next == len(s.m[path])}, nil
}

func (s *streams) events(path string) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.m[path]...)
}

func TestInbox(t *testing.T) {
	st := &streams{m: map[string][][]byte{}}
	providers := []inbox.Provider{{Name: "github", Scheme: inbox.GitHub{Secret: "s"}}, {Name: "standard", Scheme: inbox.StandardWebhooks{Secret: "whsec_c2VjcmV0"}}}
	p, err := inbox.NewProcessor(st, providers)
	require.NoError(t, err)
	rec := inbox.Record{Provider: "github", DeliveryID: "d-1", ReceivedAt: time.Unix(1_700_000_000, 0),
		Header: http.Header{"X-Github-Event": {"issues"}}, Body: []byte(`{"action":"opened"}`)}
	raw, err := json.Marshal(rec)
	require.NoError(t, err)
	require.NoError(t, st.Append(t.Context(), "/inbox/github/records", raw))
	forged := rec
	forged.DeliveryID = "d-2"
	dead, err := json.Marshal(inbox.DeadLetter{Record: forged, Reason: "invalid signature", DeadAt: time.Unix(1_700_000_100, 0)})
	require.NoError(t, err)
	require.NoError(t, st.Append(t.Context(), "/inbox/github/dead", dead))

	f := newFixture(t, ui.WithInbox(&ui.Inbox{Providers: providers, Streams: st, Processor: p}))
	assert.Contains(t, f.get("/ui/"), `href="/ui/inbox"`)
	records := f.get("/ui/inbox?provider=github")
	assert.Contains(t, records, "d-1")
	assert.Contains(t, records, "issues")
	assert.NotContains(t, records, "Replay")
	deadPage := f.get("/ui/inbox?provider=github&kind=dead")
	assert.Contains(t, deadPage, "d-2")
	assert.Contains(t, deadPage, "invalid signature")
	assert.Contains(t, deadPage, "Replay")
	assert.Contains(t, f.get("/ui/inbox?provider=standard"), "Nothing")
	assert.Equal(t, http.StatusNotFound, f.request(http.MethodGet, "/ui/inbox?provider=gitlab", operatorToken, nil, nil).Code)
	assert.Equal(t, http.StatusUnauthorized, f.request(http.MethodGet, "/ui/inbox", "", nil, nil).Code)

	replay := url.Values{"provider": {"github"}, "index": {"0"}}
	for _, refused := range []struct {
		token  string
		header map[string]string
		want   int
	}{
		{"", nil, http.StatusUnauthorized},
		{readerToken, nil, http.StatusForbidden},
		{operatorToken, map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
	} {
		w := f.request(http.MethodPost, "/ui/inbox/replay", refused.token, replay, refused.header)
		assert.Equal(t, refused.want, w.Code, w.Body.String())
		assert.Len(t, st.events("/inbox/github/records"), 1, "replayed though refused")
	}
	w := f.request(http.MethodPost, "/ui/inbox/replay", operatorToken, url.Values{"provider": {"github"}, "index": {"1"}}, nil)
	assert.Equal(t, http.StatusBadRequest, w.Code, "no second dead letter")
	w = f.request(http.MethodPost, "/ui/inbox/replay", operatorToken, replay, nil)
	require.Equal(t, http.StatusSeeOther, w.Code, w.Body.String())
	got := st.events("/inbox/github/records")
	require.Len(t, got, 2)
	var again inbox.Record
	require.NoError(t, json.Unmarshal(got[1], &again))
	assert.Equal(t, "d-2", again.DeliveryID)
}

func TestNoInboxNoInboxPages(t *testing.T) {
	f := newFixture(t)
	assert.NotContains(t, f.get("/ui/"), `href="/ui/inbox"`)
	assert.Equal(t, http.StatusNotFound, f.request(http.MethodGet, "/ui/inbox", operatorToken, nil, nil).Code)
	assert.Equal(t, http.StatusNotFound, f.request(http.MethodPost, "/ui/inbox/replay", operatorToken, url.Values{"provider": {"github"}}, nil).Code)
}

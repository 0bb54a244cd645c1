package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/inbox"
)

// cursor is the engine's acknowledged offset of the inbox subscription's
// consumer of a records stream, as a host gives it to an Admin.
func (h *host) cursor(ctx context.Context, stream string) (string, error) {
	c, err := h.engine.Consumer(ctx, webhooks.ConsumerID("inbox", stream))
	if errors.Is(err, webhooks.ErrConsumerNotFound) {
		return webhooks.OffsetNone, nil
	}
	if err != nil {
		return "", err
	}
	for _, s := range c.Streams {
		if s.Path == stream {
			return s.Offset, nil
		}
	}
	return webhooks.OffsetNone, nil
}

// adminHost has processed d1, set d2 aside as a dead letter, and is
// processing d3, which blocks until the test ends.
func adminHost(t *testing.T) (*host, *inbox.Admin) {
	h := newHost(t, 2, 1)
	entered, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) })
	handler, ids := processed(func(id string) error {
		switch id {
		case "d2":
			return errors.New("cannot parse the payload")
		case "d3":
			close(entered)
			<-release
		}
		return nil
	})
	h.processor.Handle("github", "", handler)
	h.deliver("d1", `{"n":1}`, githubSecret)
	h.deliver("d2", `{"n":2}`, githubSecret)
	h.deliver("d3", `{"n":3}`, githubSecret)
	require.Equal(t, "d1", next(t, ids))
	require.Equal(t, "d2", h.nextDead().DeliveryID)
	<-entered
	return h, h.processor.Admin(h, h.cursor)
}

func ids(p *inbox.Page) []string {
	var out []string
	for _, e := range p.Entries {
		out = append(out, e.Record.DeliveryID)
	}
	return out
}

// TestAdminListsByStatus: pending and done come from the engine's durable
// cursor on the records stream, dead from the dead-letter stream, a page
// at a time.
func TestAdminListsByStatus(t *testing.T) {
	h, admin := adminHost(t)
	ctx := context.Background()
	for status, want := range map[inbox.Status][]string{
		inbox.StatusPending: {"d3"},
		inbox.StatusDone:    {"d1", "d2"},
		inbox.StatusDead:    {"d2"},
	} {
		p, err := admin.List(ctx, "github", status, "", 10)
		require.NoError(t, err, status)
		assert.Equal(t, want, ids(p), status)
		assert.Empty(t, p.Next, status)
	}
	// Pages: one record at a time, on from Next.
	p, err := admin.List(ctx, "github", inbox.StatusDone, "", 1)
	require.NoError(t, err)
	require.Equal(t, []string{"d1"}, ids(p))
	require.NotEmpty(t, p.Next)
	p, err = admin.List(ctx, "github", inbox.StatusDone, p.Next, 1)
	require.NoError(t, err)
	require.Equal(t, []string{"d2"}, ids(p))
	_, err = admin.List(ctx, "gitlab", inbox.StatusDone, "", 1)
	require.ErrorIs(t, err, inbox.ErrNotFound)

	// Over HTTP.
	w := httptest.NewRecorder()
	admin.Handler("github").ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/inbox/github?status=pending", nil))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var page inbox.Page
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &page))
	require.Equal(t, []string{"d3"}, ids(&page))
	require.Equal(t, inbox.StatusPending, page.Entries[0].Status)
	for _, q := range []string{"status=processing", "", "status=done&limit=0", "status=done&limit=x"} {
		w := httptest.NewRecorder()
		admin.Handler("github").ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/inbox/github?"+q, nil))
		assert.Equal(t, http.StatusBadRequest, w.Code, q)
	}
	_ = h
}

// TestAdminReplaysByID: a dead letter is replayed by its delivery id, or
// its offset, as read from the dead-letter stream; a body is never read,
// so a forged dead letter cannot be replayed.
func TestAdminReplaysByID(t *testing.T) {
	h, admin := adminHost(t)
	count := func() int {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.streams[records])
	}
	post := func(query, body string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		admin.Handler("github").ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/inbox/github/dead?"+query, strings.NewReader(body)))
		return w
	}
	forged, err := json.Marshal(inbox.DeadLetter{Record: inbox.Record{Provider: "github", DeliveryID: "forged", Body: []byte("{}")}, Reason: "x"})
	require.NoError(t, err)
	for query, status := range map[string]int{
		"replay=forged":  http.StatusNotFound,
		"replay":         http.StatusBadRequest,
		"replay=d1":      http.StatusNotFound,   // processed, never dead
		"at=bm9uc2Vuc2U": http.StatusBadRequest, // not a position
		"offset=x":       http.StatusBadRequest,
	} {
		w := post(query, string(forged))
		assert.Equal(t, status, w.Code, query)
		assert.Contains(t, w.Body.String(), `"ok":false`, query)
	}
	require.Equal(t, 3, count(), "nothing replayed")

	w := post("replay=d2", "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Equal(t, 4, count())
	dead, err := admin.List(context.Background(), "github", inbox.StatusDead, "", 1)
	require.NoError(t, err)
	w = post("at="+dead.Entries[0].At, "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	h.mu.Lock()
	got := h.streams[records][3:]
	h.mu.Unlock()
	for _, raw := range got {
		var rec inbox.Record
		require.NoError(t, json.Unmarshal(raw, &rec))
		assert.Equal(t, "d2", rec.DeliveryID)
		assert.NotEmpty(t, rec.Replay)
	}
	require.ErrorIs(t, admin.Replay(context.Background(), "gitlab", "d2"), inbox.ErrNotFound)
}

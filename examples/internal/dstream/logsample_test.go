package dstream

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/internal/mockclock"
)

// downStorage is a storage whose reads fail, as in an outage.
type downStorage struct{ storage }

func (downStorage) read(context.Context, string, int, int) (snapshot, bool, error) {
	return snapshot{}, false, errors.New("connection refused")
}

func (downStorage) stat(context.Context, string) (streamMeta, bool, error) {
	return streamMeta{}, false, errors.New("connection refused")
}

// An outage fails every request, and is logged at ERROR once an interval,
// with the count of the failures not logged since: a 30 s outage does not
// flood the log, and no failure goes uncounted.
func TestStorageFailuresAreSampled(t *testing.T) {
	var logs bytes.Buffer
	mock := mockclock.New()
	s := New(Options{Clock: mock, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	s.store = downStorage{s.store}
	fail := func(n int) {
		for range n {
			w := httptest.NewRecorder()
			s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/a?offset=-1", nil))
			require.Equal(t, http.StatusInternalServerError, w.Code)
		}
	}
	lines := func() []string { return strings.Split(strings.TrimSpace(logs.String()), "\n") }

	fail(300)
	require.Len(t, lines(), 1, "the first failure is logged, the rest of the interval counted")
	require.Contains(t, lines()[0], "level=ERROR")
	require.NotContains(t, lines()[0], "suppressed")

	mock.Add(storageLogInterval)
	fail(300)
	require.Len(t, lines(), 2)
	require.Contains(t, lines()[1], "suppressed=299", "the failures not logged before it")

	mock.Add(storageLogInterval)
	fail(1)
	require.Len(t, lines(), 3)
	require.Contains(t, lines()[2], "suppressed=299")

	// Another operation's failure is not held back by the reads'.
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest(http.MethodHead, "/a", nil))
	require.Equal(t, http.StatusInternalServerError, w.Code)
	require.Len(t, lines(), 4)
	require.Contains(t, lines()[3], "op=head")
}

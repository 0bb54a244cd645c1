package agent

import (
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/internal/webhooksig"
	"github.com/streamhooks/webhooks/receiver"
)

// TestRejectsUnverifiedNotifications checks that the agent acts only on
// notifications signed with its secret: anything else is refused before a
// single step, so no callback or read is made on its behalf.
func TestRejectsUnverifiedNotifications(t *testing.T) {
	const secret = "whsec_agent"
	body := `{"consumer_id":"s:%2Fa","epoch":1,"wake_id":"w_1","primary_stream":"/a",` +
		`"streams":[{"path":"/a","offset":"-1"}],"callback":"http://127.0.0.1:1/callback/s:%2Fa","token":"t"}`
	var steps []Step
	a, err := New(Config{Secret: secret, StreamServer: "http://127.0.0.1:1", OnStep: func(s Step) { steps = append(steps, s) }})
	require.NoError(t, err)

	for _, tc := range []struct {
		name      string
		body      string
		signature string
		want      int
	}{
		{"unsigned", body, "", http.StatusUnauthorized},
		{"other secret", body, sign("whsec_other", time.Now(), []byte(body)), http.StatusUnauthorized},
		{"stale", body, sign(secret, time.Now().Add(-time.Hour), []byte(body)), http.StatusUnauthorized},
		{"not a notification", `{"epoch":1}`, sign(secret, time.Now(), []byte(`{"epoch":1}`)), http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "/wake", strings.NewReader(tc.body))
			req.Header.Set(receiver.SignatureHeader, tc.signature)
			rec := httptest.NewRecorder()
			a.ServeHTTP(rec, req)
			require.Equal(t, tc.want, rec.Code, rec.Body.String())
		})
	}
	require.Empty(t, steps)
}

// TestNewValidates checks that a misconfigured agent fails at start, not on
// the first wake.
func TestNewValidates(t *testing.T) {
	_, err := New(Config{StreamServer: "http://127.0.0.1:8787"})
	require.ErrorContains(t, err, "secret")
	_, err = New(Config{Secret: "whsec_x", StreamServer: "127.0.0.1:8787"})
	require.ErrorContains(t, err, "not an absolute")
}

// sign is a spec 001 signature header of body by secret at t, as the
// engine makes it.
func sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",sha256=" + hex.EncodeToString(webhooksig.StreamhooksMAC(secret, ts, body))
}

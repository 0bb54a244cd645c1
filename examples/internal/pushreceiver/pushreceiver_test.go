package pushreceiver

import (
	"encoding/hex"
	"errors"
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

const secret = "whsec_test"

func post(t *testing.T, r http.Handler, id, body, signature string) int {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	req.Header.Set(receiver.IDHeader, id)
	req.Header.Set(receiver.SignatureHeader, signature)
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, req)
	return rec.Code
}

func TestReceiverHandlesEachDeliveryOnce(t *testing.T) {
	var handled []string
	fail := true
	r, err := New(secret, func(p *receiver.EventsPayload) error {
		if fail {
			fail = false
			return errors.New("busy")
		}
		handled = append(handled, p.DeliveryID)
		return nil
	})
	require.NoError(t, err)
	body := `{"subscription_id":"s","stream":"/a","delivery_id":"msg_1","events":[1]}`
	sig := sign(secret, time.Now(), []byte(body))
	require.Equal(t, http.StatusInternalServerError, post(t, r, "msg_1", body, sig), "a failed handling asks for a retry")
	require.Equal(t, http.StatusNoContent, post(t, r, "msg_1", body, sig))
	require.Equal(t, http.StatusNoContent, post(t, r, "msg_1", body, sig), "a retry after a 2xx the engine missed")
	require.Equal(t, []string{"msg_1"}, handled)

	require.Equal(t, http.StatusUnauthorized, post(t, r, "msg_1", body, sign("whsec_other", time.Now(), []byte(body))))
	require.Equal(t, http.StatusBadRequest, post(t, r, "msg_2", body, sig), "the header and the body name the same delivery")
}

// sign is a spec 001 signature header of body by secret at t, as the
// engine makes it.
func sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",sha256=" + hex.EncodeToString(webhooksig.StreamhooksMAC(secret, ts, body))
}

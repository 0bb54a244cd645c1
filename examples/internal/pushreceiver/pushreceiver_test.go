package pushreceiver

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

const secret = "whsec_test"

func post(t *testing.T, r http.Handler, id, body, signature string) int {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	req.Header.Set(webhooks.DeliveryIDHeader, id)
	req.Header.Set(webhooks.SignatureHeader, signature)
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, req)
	return rec.Code
}

func TestReceiverHandlesEachDeliveryOnce(t *testing.T) {
	var handled []string
	fail := true
	r := New(secret, func(p *webhooks.EventsPayload) error {
		if fail {
			fail = false
			return errors.New("busy")
		}
		handled = append(handled, p.DeliveryID)
		return nil
	})
	body := `{"delivery_id":"msg_1","events":[1]}`
	sig := webhooks.SignPayload(secret, time.Now(), []byte(body))
	require.Equal(t, http.StatusInternalServerError, post(t, r, "msg_1", body, sig), "a failed handling asks for a retry")
	require.Equal(t, http.StatusNoContent, post(t, r, "msg_1", body, sig))
	require.Equal(t, http.StatusNoContent, post(t, r, "msg_1", body, sig), "a retry after a 2xx the engine missed")
	require.Equal(t, []string{"msg_1"}, handled)

	require.Equal(t, http.StatusUnauthorized, post(t, r, "msg_1", body, webhooks.SignPayload("whsec_other", time.Now(), []byte(body))))
	require.Equal(t, http.StatusBadRequest, post(t, r, "msg_2", body, sig), "the header and the body name the same delivery")
}

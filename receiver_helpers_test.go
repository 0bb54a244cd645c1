package webhooks_test

import (
	"context"
	"net/http"
	"time"

	"github.com/streamhooks/webhooks/receiver"
)

// verifySignature verifies the signature headers h of body with secret,
// as a receiver would at now.
func verifySignature(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	v, err := receiver.NewVerifier(receiver.WithSecret(secret), receiver.WithTolerance(tolerance), receiver.WithClock(func() time.Time { return now }))
	if err != nil {
		return err
	}
	return v.Verify(context.Background(), h, body)
}

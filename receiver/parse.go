package receiver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

const (
	// MaxNotificationBytes bounds the body ParseNotification reads.
	MaxNotificationBytes = 1 << 20
	// MaxEventsBytes bounds the body ParseEvents reads: the largest
	// batch a subscription may ask for is 16 MiB of events, which base64
	// and JSON make larger.
	MaxEventsBytes = 32 << 20
)

// ParseNotification reads the body of a wake-up request, verifies its
// signature and decodes it. Answer 401 when the error wraps
// ErrInvalidSignature, 503 when it wraps ErrKeySetUnavailable, else 400. Unknown fields are ignored, so that a
// receiver keeps working when the engine adds some.
func (v *Verifier) ParseNotification(r *http.Request) (*Notification, error) {
	var n Notification
	if err := v.parse(r, MaxNotificationBytes, &n); err != nil {
		return nil, err
	}
	switch {
	case n.ConsumerID == "":
		return nil, errors.New("receiver: notification has no consumer_id")
	case n.WakeID == "":
		return nil, errors.New("receiver: notification has no wake_id")
	case n.Callback == "":
		return nil, errors.New("receiver: notification has no callback")
	case n.Token == "":
		return nil, errors.New("receiver: notification has no token")
	}
	return &n, nil
}

// ParseEvents reads the body of an event-push request, verifies its
// signature and decodes it, as ParseNotification does.
func (v *Verifier) ParseEvents(r *http.Request) (*EventsPayload, error) {
	var p EventsPayload
	if err := v.parse(r, MaxEventsBytes, &p); err != nil {
		return nil, err
	}
	switch {
	case p.SubscriptionID == "":
		return nil, errors.New("receiver: events have no subscription_id")
	case p.Stream == "":
		return nil, errors.New("receiver: events have no stream")
	case p.DeliveryID == "":
		return nil, errors.New("receiver: events have no delivery_id")
	}
	return &p, nil
}

// parse reads r's body, at most limit bytes, verifies it and decodes it
// into v.
func (v *Verifier) parse(r *http.Request, limit int64, dst any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return fmt.Errorf("receiver: reading body: %w", err)
	}
	if int64(len(body)) > limit {
		return fmt.Errorf("receiver: body exceeds %d bytes", limit)
	}
	if err := v.Verify(r.Context(), r.Header, body); err != nil {
		return err
	}
	if err := json.Unmarshal(body, dst); err != nil {
		return fmt.Errorf("receiver: decoding body: %w", err)
	}
	return nil
}

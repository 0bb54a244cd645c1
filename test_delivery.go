package webhooks

import (
	"context"
	"encoding/json"
	"time"
)

// TestEventType is the type of the body of a test delivery.
const TestEventType = "webhook.test"

// TestDelivery is what a test delivery came to (Engine.SendTestDelivery).
type TestDelivery struct {
	DeliveryID string `json:"delivery_id"`
	// Delivered is set if the webhook answered 2xx.
	Delivered    bool    `json:"delivered"`
	StatusCode   int     `json:"status_code,omitempty"`
	LatencyMS    float64 `json:"latency_ms"`
	ErrorClass   string  `json:"error_class,omitempty"`
	Error        string  `json:"error,omitempty"`
	ResponseBody string  `json:"response_body,omitempty"`
}

// testEvent is the body of a test delivery.
type testEvent struct {
	Type           string    `json:"type"`
	SubscriptionID string    `json:"subscription_id"`
	DeliveryID     string    `json:"delivery_id"`
	SentAt         time.Time `json:"sent_at"`
}

// SendTestDelivery POSTs a signed test event to the webhook of
// subscription id, whatever its status, and returns the outcome. It moves
// no cursor and counts in neither the subscription's health nor its rate
// limit. It returns ErrSubscriptionNotFound if there is no such
// subscription.
func (e *Engine) SendTestDelivery(ctx context.Context, id string) (*TestDelivery, error) {
	if err := e.checkLoaded(); err != nil {
		return nil, err
	}
	sub, err := e.subscription(ctx, id)
	if err != nil {
		return nil, err
	}
	mech := mechanismOf(sub)
	if err := mech.transport().testable(); err != nil {
		return nil, err
	}
	e.tel.operated(ctx, "test")
	now := e.clock.Now()
	ev := testEvent{Type: TestEventType, SubscriptionID: sub.ID, DeliveryID: newDeliveryID(), SentAt: now.UTC()}
	body, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	msg := &message{id: ev.DeliveryID, body: body, timeout: mech.requestTimeout(&e.core.rules, sub)}
	resp, err := mech.transport().send(ctx, e.x, sub, msg, nil)
	if err != nil {
		return nil, err
	}
	out := &TestDelivery{
		DeliveryID: ev.DeliveryID, Delivered: resp.failure == nil, StatusCode: resp.status,
		LatencyMS: float64(resp.latency) / float64(time.Millisecond), ResponseBody: resp.preview,
	}
	if f := resp.failure; f != nil {
		out.ErrorClass, out.Error = string(f.class), f.detail()
	}
	return out, nil
}

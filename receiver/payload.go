package receiver

import "encoding/json"

// StreamOffset is a stream and an offset in it: in a Notification, the
// last acknowledged offset, inclusive; in an acknowledgement, the offset
// processed through. "-1" is before the stream's first event.
type StreamOffset struct {
	Path   string `json:"path"`
	Offset string `json:"offset"`
}

// Notification is the JSON body of a wake-up POST (spec 001): the consumer
// it wakes, and how to call back.
type Notification struct {
	ConsumerID    string         `json:"consumer_id"`
	Epoch         int64          `json:"epoch"`
	WakeID        string         `json:"wake_id"`
	PrimaryStream string         `json:"primary_stream"`
	Streams       []StreamOffset `json:"streams"`
	TriggeredBy   []string       `json:"triggered_by"`
	Callback      string         `json:"callback"`
	Token         string         `json:"token"`
}

// DoneResponse is the response body with which a receiver finishes a wake
// synchronously, {"done": true}: the engine acknowledges every stream to
// its tail.
type DoneResponse struct {
	Done bool `json:"done"`
}

// EventsPayload is the JSON body of an event-push POST: a batch of one
// stream's events. A 2xx response acknowledges the whole batch, or with
// an AckResponse body part of it.
type EventsPayload struct {
	SubscriptionID string `json:"subscription_id"`
	Stream         string `json:"stream"`
	// DeliveryID is the batch's id, also in IDHeader: every attempt of a
	// batch carries the same.
	DeliveryID string `json:"delivery_id"`
	// Events are the stream's messages as JSON values, in stream order;
	// a byte stream's are base64 strings. A filter may have left some out.
	Events []json.RawMessage `json:"events"`
	// FirstOffset is the offset the batch was read from, "-1" for the
	// stream's start, and Offset the one after its last event: the batch
	// covers the stream between them.
	FirstOffset string `json:"first_offset"`
	Offset      string `json:"offset"`
	// UpToDate is true when Offset was the stream's tail when the batch
	// began. Every attempt of a batch carries the same body but for the
	// signature.
	UpToDate bool `json:"up_to_date"`
	// Offsets, if the stream's source gives them, holds one offset per
	// event of Events: the offset just after that event, where a receiver
	// that has processed it would resume. A receiver checkpoints by them,
	// and may acknowledge part of a batch with AckResponse.
	Offsets []string `json:"offsets,omitempty"`
}

// AckResponse is the 2xx response body with which a receiver acknowledges
// part of an event-push batch, {"offset": "…"}: the events up to the one
// whose entry in EventsPayload.Offsets is Offset. The engine moves its
// cursor there and sends the rest again as a new batch, under a new
// delivery id. An Offset that is not one of the batch's Offsets, nor its
// Offset, fails the whole batch, which is retried. An empty Offset, or a
// body that is not one, acknowledges the whole batch.
type AckResponse struct {
	Offset string `json:"offset,omitempty"`
}

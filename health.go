package webhooks

import (
	"encoding/binary"
	"errors"
	"time"
)

// SubscriptionHealth is a webhook's recent record of deliveries, across
// all of its subscription's consumers and every engine sharing the Store.
type SubscriptionHealth struct {
	// ConsecutiveFailures counts failed delivery attempts since the last
	// one that succeeded.
	ConsecutiveFailures int
	// FailingSince is when the current run of failures began; zero while
	// deliveries succeed.
	FailingSince      time.Time
	LastSuccessAt     time.Time
	LastFailureAt     time.Time
	LastFailureReason string
}

// subscriptionHealthV1 is the format MarshalBinary writes: a version byte,
// ConsecutiveFailures, the three times as consumer data encodes them, and
// LastFailureReason.
const subscriptionHealthV1 = 1

var errCorruptHealth = errors.New("webhooks: corrupt subscription health")

// MarshalBinary encodes h for a Store, which keeps it as one opaque value.
// It fails for a time outside the years 1678 to 2262.
func (h *SubscriptionHealth) MarshalBinary() ([]byte, error) {
	b := []byte{subscriptionHealthV1}
	b = binary.AppendVarint(b, int64(h.ConsecutiveFailures))
	var err error
	for _, t := range []time.Time{h.FailingSince, h.LastSuccessAt, h.LastFailureAt} {
		if b, err = appendTime(b, t); err != nil {
			return nil, err
		}
	}
	return appendString(b, h.LastFailureReason), nil
}

// UnmarshalBinary sets h from data that MarshalBinary wrote, or to zero if
// data is empty. It leaves h unchanged if data is corrupt.
func (h *SubscriptionHealth) UnmarshalBinary(data []byte) error {
	var out SubscriptionHealth
	if len(data) > 0 {
		d := decoder{b: data}
		if d.byte() != subscriptionHealthV1 {
			return errCorruptHealth
		}
		out.ConsecutiveFailures = int(d.varint())
		for _, t := range []*time.Time{&out.FailingSince, &out.LastSuccessAt, &out.LastFailureAt} {
			*t = d.time()
		}
		out.LastFailureReason = d.string()
		if d.err != nil || len(d.b) != 0 {
			return errCorruptHealth
		}
	}
	*h = out
	return nil
}

package webhooks

import (
	"encoding/binary"
	"errors"
	"maps"
	"slices"
	"time"
)

// A Store keeps a subscription's fields beyond its columns as the value of
// MarshalData: a format version byte, then the fields in the order of
// MarshalData, as consumer data encodes them. Released versions never
// change; UnmarshalData reads every one of them, and an empty value, which
// a Store gives for a subscription stored before it kept one, as all
// fields zero.

// Subscription data versions: version 1 holds Delivery; version 2, which
// MarshalData writes, adds Status and Events.
const (
	subscriptionDataV1 = 1
	subscriptionDataV2 = 2
)

var errCorruptSubscriptionData = errors.New("webhooks: corrupt subscription data")

// MarshalData encodes the fields of s that a Store keeps no column for:
// every field but ID, Pattern, Webhook, Description, Secret and CreatedAt.
func (s *Subscription) MarshalData() []byte {
	b := []byte{subscriptionDataV2}
	b = appendString(b, string(s.Delivery))
	b = appendString(b, string(s.Status))
	ev := s.Events
	b = appendBool(b, ev != nil)
	if ev == nil {
		return b
	}
	for _, v := range []int64{int64(ev.MaxBatchEvents), int64(ev.MaxBatchBytes), int64(ev.MaxWait), int64(ev.Timeout), int64(ev.MaxAttempts)} {
		b = binary.AppendVarint(b, v)
	}
	// Sorted, so that equal subscriptions encode alike.
	b = binary.AppendUvarint(b, uint64(len(ev.Headers)))
	for _, k := range slices.Sorted(maps.Keys(ev.Headers)) {
		b = appendString(appendString(b, k), ev.Headers[k])
	}
	b = appendBool(b, ev.Filter != nil)
	if f := ev.Filter; f != nil {
		b = appendString(b, f.Field)
		b = binary.AppendUvarint(b, uint64(len(f.Patterns)))
		for _, p := range f.Patterns {
			b = appendString(b, p)
		}
	}
	return b
}

// UnmarshalData sets every field of s that MarshalData encodes from data,
// which any version of this package's MarshalData wrote, or which is empty.
// It leaves the other fields alone, and s unchanged if data is corrupt.
func (s *Subscription) UnmarshalData(data []byte) error {
	var (
		delivery DeliveryMode
		status   SubscriptionStatus
		events   *EventsOptions
	)
	if len(data) > 0 {
		d := decoder{b: data}
		version := d.byte()
		if version != subscriptionDataV1 && version != subscriptionDataV2 {
			return errCorruptSubscriptionData
		}
		delivery = DeliveryMode(d.string())
		if version >= subscriptionDataV2 {
			status = SubscriptionStatus(d.string())
			if d.byte() == 1 {
				events = d.eventsOptions()
			}
		}
		if d.err != nil || len(d.b) != 0 {
			return errCorruptSubscriptionData
		}
	}
	s.Delivery, s.Status, s.Events = delivery, status, events
	return nil
}

func (d *decoder) eventsOptions() *EventsOptions {
	ev := &EventsOptions{
		MaxBatchEvents: int(d.varint()),
		MaxBatchBytes:  int(d.varint()),
		MaxWait:        time.Duration(d.varint()),
		Timeout:        time.Duration(d.varint()),
		MaxAttempts:    int(d.varint()),
	}
	if n := d.count(); n > 0 {
		ev.Headers = make(map[string]string, n)
		for range n {
			k := d.string()
			ev.Headers[k] = d.string()
		}
	}
	if d.byte() == 1 {
		ev.Filter = &EventFilter{Field: d.string()}
		if n := d.count(); n > 0 {
			ev.Filter.Patterns = make([]string, n)
			for i := range ev.Filter.Patterns {
				ev.Filter.Patterns[i] = d.string()
			}
		}
	}
	return ev
}

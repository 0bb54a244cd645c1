package webhooks

import "errors"

// A Store keeps a subscription's fields beyond its columns as the value of
// MarshalData: a format version byte, then the fields in the order of
// MarshalData, as consumer data encodes them. Released versions never
// change; UnmarshalData reads every one of them, and an empty value, which
// a Store gives for a subscription stored before it kept one, as all
// fields zero.

// subscriptionDataV1 is the version MarshalData writes.
const subscriptionDataV1 = 1

var errCorruptSubscriptionData = errors.New("webhooks: corrupt subscription data")

// MarshalData encodes the fields of s that a Store keeps no column for:
// every field but ID, Pattern, Webhook, Description, Secret and CreatedAt.
func (s *Subscription) MarshalData() []byte {
	b := []byte{subscriptionDataV1}
	return appendString(b, string(s.Delivery))
}

// UnmarshalData sets every field of s that MarshalData encodes from data,
// which any version of this package's MarshalData wrote, or which is empty.
// It leaves the other fields alone, and s unchanged if data is corrupt.
func (s *Subscription) UnmarshalData(data []byte) error {
	var delivery DeliveryMode
	if len(data) > 0 {
		d := decoder{b: data}
		if d.byte() != subscriptionDataV1 {
			return errCorruptSubscriptionData
		}
		delivery = DeliveryMode(d.string())
		if d.err != nil || len(d.b) != 0 {
			return errCorruptSubscriptionData
		}
	}
	s.Delivery = delivery
	return nil
}

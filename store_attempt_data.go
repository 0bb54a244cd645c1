package webhooks

import (
	"encoding/binary"
	"errors"
	"time"
)

// deliveryAttemptV1 is the format MarshalData writes: a version byte
// and every field but ConsumerID, in order.
const deliveryAttemptV1 = 1

var errCorruptAttempt = errors.New("webhooks: corrupt delivery attempt")

// MarshalData encodes every field of a but ConsumerID, which a Store
// keeps as a column, as one opaque value. It fails for a time outside the
// years 1678 to 2262. Like Consumer.MarshalData, it is not MarshalBinary,
// since it leaves a field out.
// Only Store implementations call it; applications never need to.
func (a *DeliveryAttempt) MarshalData() ([]byte, error) {
	b, err := appendTime([]byte{deliveryAttemptV1}, a.At)
	if err != nil {
		return nil, err
	}
	b = appendString(b, a.DeliveryID)
	b = binary.AppendVarint(b, int64(a.Attempt))
	b = binary.AppendVarint(b, int64(a.StatusCode))
	b = binary.AppendVarint(b, int64(a.Latency))
	b = appendString(b, a.ErrorClass)
	b = appendString(b, a.Error)
	return appendString(b, a.ResponseBody), nil
}

// UnmarshalData sets every field of a but ConsumerID from data that
// MarshalData wrote. It leaves a unchanged if data is corrupt.
// Only Store implementations call it; applications never need to.
func (a *DeliveryAttempt) UnmarshalData(data []byte) error {
	d := decoder{b: data}
	if d.byte() != deliveryAttemptV1 {
		return errCorruptAttempt
	}
	out := DeliveryAttempt{ConsumerID: a.ConsumerID, At: d.time(), DeliveryID: d.string()}
	out.Attempt = int(d.varint())
	out.StatusCode = int(d.varint())
	out.Latency = time.Duration(d.varint())
	out.ErrorClass = d.string()
	out.Error = d.string()
	out.ResponseBody = d.string()
	if d.err != nil || len(d.b) != 0 {
		return errCorruptAttempt
	}
	*a = out
	return nil
}

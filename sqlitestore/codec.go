package sqlitestore

import (
	"encoding/binary"
	"errors"
	"time"

	webhooks "github.com/streamhooks/webhooks"
)

// A consumer's row keeps in columns what the schema indexes or counts (ID,
// subscription, primary stream, state, deadline) and the rest in one blob:
// a row is then read and written with few columns, and decoded without
// reflection. The blob is a format version, then the fields in the order of
// encodeConsumerData, integers as varints, strings and lists length-first,
// and times as UTC Unix nanoseconds after a byte that says whether they are
// set.

// consumerDataV1 is the blob format this package writes and reads.
const consumerDataV1 = 1

var errCorrupt = errors.New("sqlitestore: corrupt consumer data")

// encodeConsumerData returns the blob of c. Nil and empty lists encode
// alike.
func encodeConsumerData(c *webhooks.Consumer) ([]byte, error) {
	b := make([]byte, 0, 128)
	b = append(b, consumerDataV1)
	b = binary.AppendVarint(b, c.Epoch)
	b = appendString(b, c.WakeID)
	b = appendOffsets(b, c.Streams)
	b = appendOffsets(b, c.WakeTails)
	b = binary.AppendUvarint(b, uint64(len(c.TriggeredBy)))
	for _, p := range c.TriggeredBy {
		b = appendString(b, p)
	}
	b = binary.AppendVarint(b, int64(c.Attempt))
	b = appendBool(b, c.InFlight)
	b = binary.AppendVarint(b, int64(c.Failures))
	for _, t := range []time.Time{c.FailingSince, c.CreatedAt, c.UpdatedAt} {
		n, err := nanos(t)
		if err != nil {
			return nil, err
		}
		b = appendBool(b, n.Valid)
		if n.Valid {
			b = binary.AppendVarint(b, n.Int64)
		}
	}
	return b, nil
}

// decodeConsumerData fills c's fields from a blob of encodeConsumerData.
func decodeConsumerData(c *webhooks.Consumer, data []byte) error {
	d := decoder{b: data}
	if d.byte() != consumerDataV1 {
		return errCorrupt
	}
	c.Epoch = d.varint()
	c.WakeID = d.string()
	c.Streams = d.offsets()
	c.WakeTails = d.offsets()
	if n := d.count(); n > 0 {
		c.TriggeredBy = make([]string, n)
		for i := range c.TriggeredBy {
			c.TriggeredBy[i] = d.string()
		}
	}
	c.Attempt = int(d.varint())
	c.InFlight = d.byte() == 1
	c.Failures = int(d.varint())
	for _, t := range []*time.Time{&c.FailingSince, &c.CreatedAt, &c.UpdatedAt} {
		if d.byte() == 1 {
			*t = time.Unix(0, d.varint()).UTC()
		}
	}
	if d.err != nil || len(d.b) != 0 {
		return errCorrupt
	}
	return nil
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendOffsets(b []byte, offsets []webhooks.StreamOffset) []byte {
	b = binary.AppendUvarint(b, uint64(len(offsets)))
	for _, so := range offsets {
		b = appendString(appendString(b, so.Path), so.Offset)
	}
	return b
}

// decoder reads a blob, remembering the first error; once it has failed it
// returns zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.err = errCorrupt
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errCorrupt
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a list length, which cannot exceed the bytes left.
func (d *decoder) count() int {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > uint64(len(d.b)-n) {
		d.err = errCorrupt
		return 0
	}
	d.b = d.b[n:]
	return int(v)
}

func (d *decoder) string() string {
	n := d.count()
	if d.err != nil {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) offsets() []webhooks.StreamOffset {
	n := d.count()
	if n == 0 {
		return nil
	}
	out := make([]webhooks.StreamOffset, n)
	for i := range out {
		out[i] = webhooks.StreamOffset{Path: d.string(), Offset: d.string()}
	}
	return out
}

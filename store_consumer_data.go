package webhooks

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// A Store keeps in columns the consumer fields it indexes or queries (ID,
// SubscriptionID, PrimaryStream, State, Deadline) and the rest as the one
// value MarshalData returns, so that a field added to Consumer needs no
// migration in any backend: only a new version of this format.
//
// The value is a format version byte, then the fields in the order of
// MarshalData: integers as varints, strings and lists length first, times
// as UTC Unix nanoseconds after a byte that says whether they are set.
// Released versions never change; UnmarshalData reads every one of them.

// Consumer data versions. Version 1 is the format that sqlitestore wrote
// before the engine owned it; version 2 adds LastError and Batch; version
// 3, which MarshalData writes, adds BatchEnd and Skipped.
const (
	consumerDataV1 = 1
	consumerDataV2 = 2
	consumerDataV3 = 3
)

var errCorruptData = errors.New("webhooks: corrupt consumer data")

// Time bounds of a Unix nanosecond timestamp.
var (
	minNanoTime = time.Unix(0, math.MinInt64)
	maxNanoTime = time.Unix(0, math.MaxInt64)
)

// MarshalData encodes the fields of c that a Store does not index: every
// field but ID, SubscriptionID, PrimaryStream, State and Deadline. Times
// keep their instant to the nanosecond, not their location; nil and empty
// lists encode alike. It fails for a time outside the years 1678 to 2262.
//
// It is not MarshalBinary because it leaves out the indexed fields, which
// encoders such as encoding/gob would expect in a whole value.
// Only Store implementations call it; applications never need to.
func (c *Consumer) MarshalData() ([]byte, error) {
	b := make([]byte, 0, 128)
	b = append(b, consumerDataV3)
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
	var err error
	for _, t := range []time.Time{c.FailingSince, c.CreatedAt, c.UpdatedAt} {
		if b, err = appendTime(b, t); err != nil {
			return nil, err
		}
	}
	b = appendString(b, c.LastError)
	b = binary.AppendVarint(b, int64(c.Batch.MaxEvents))
	b = binary.AppendVarint(b, int64(c.Batch.MaxBytes))
	b = appendString(b, c.Batch.Until)
	b = appendString(b, c.BatchEnd)
	b = binary.AppendUvarint(b, uint64(len(c.Skipped)))
	for _, s := range c.Skipped {
		b = appendString(b, s.DeliveryID)
		b = appendString(b, s.From)
		b = appendString(b, s.To)
		b = binary.AppendVarint(b, int64(s.Attempts))
		b = binary.AppendVarint(b, int64(s.Failures))
		for _, t := range []time.Time{s.FailingSince, s.SkippedAt} {
			if b, err = appendTime(b, t); err != nil {
				return nil, err
			}
		}
		b = appendString(b, s.LastError)
	}
	return b, nil
}

// UnmarshalData sets every field of c that MarshalData encodes from data,
// which any version of this package's MarshalData wrote; a field that data's
// version lacks becomes zero. It leaves the indexed fields alone, for the
// Store to set from its columns, and leaves c unchanged if data is corrupt.
// Only Store implementations call it; applications never need to.
func (c *Consumer) UnmarshalData(data []byte) error {
	d := decoder{b: data}
	version := d.byte()
	if version < consumerDataV1 || version > consumerDataV3 {
		return errCorruptData
	}
	// Decoding into a fresh value zeroes what data does not set.
	out := Consumer{ID: c.ID, SubscriptionID: c.SubscriptionID, PrimaryStream: c.PrimaryStream, State: c.State, Deadline: c.Deadline}
	out.Epoch = d.varint()
	out.WakeID = d.string()
	out.Streams = d.offsets()
	out.WakeTails = d.offsets()
	if n := d.count(); n > 0 {
		out.TriggeredBy = make([]string, n)
		for i := range out.TriggeredBy {
			out.TriggeredBy[i] = d.string()
		}
	}
	out.Attempt = int(d.varint())
	out.InFlight = d.byte() == 1
	out.Failures = int(d.varint())
	for _, t := range []*time.Time{&out.FailingSince, &out.CreatedAt, &out.UpdatedAt} {
		*t = d.time()
	}
	if version >= consumerDataV2 {
		out.LastError = d.string()
		out.Batch.MaxEvents = int(d.varint())
		out.Batch.MaxBytes = int(d.varint())
		out.Batch.Until = d.string()
	}
	if version >= consumerDataV3 {
		out.BatchEnd = d.string()
		if n := d.count(); n > 0 {
			out.Skipped = make([]SkippedBatch, n)
			for i := range out.Skipped {
				s := &out.Skipped[i]
				s.DeliveryID, s.From, s.To = d.string(), d.string(), d.string()
				s.Attempts, s.Failures = int(d.varint()), int(d.varint())
				s.FailingSince, s.SkippedAt = d.time(), d.time()
				s.LastError = d.string()
			}
		}
	}
	if d.err != nil || len(d.b) != 0 {
		return errCorruptData
	}
	*c = out
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

// appendTime appends whether t is set and, if it is, its UTC Unix
// nanoseconds.
func appendTime(b []byte, t time.Time) ([]byte, error) {
	if t.IsZero() {
		return appendBool(b, false), nil
	}
	if t.Before(minNanoTime) || t.After(maxNanoTime) {
		return nil, fmt.Errorf("webhooks: time %v is outside the storable range", t)
	}
	return binary.AppendVarint(appendBool(b, true), t.UnixNano()), nil
}

func appendOffsets(b []byte, offsets []StreamOffset) []byte {
	b = binary.AppendUvarint(b, uint64(len(offsets)))
	for _, so := range offsets {
		b = appendString(appendString(b, so.Path), so.Offset)
	}
	return b
}

// decoder reads consumer and subscription data, remembering the first
// error; once it has failed it returns zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.err = errCorruptData
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
		d.err = errCorruptData
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
		d.err = errCorruptData
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

// time reads what appendTime wrote.
func (d *decoder) time() time.Time {
	if d.byte() != 1 {
		return time.Time{}
	}
	return time.Unix(0, d.varint()).UTC()
}

func (d *decoder) offsets() []StreamOffset {
	n := d.count()
	if n == 0 {
		return nil
	}
	out := make([]StreamOffset, n)
	for i := range out {
		out[i] = StreamOffset{Path: d.string(), Offset: d.string()}
	}
	return out
}

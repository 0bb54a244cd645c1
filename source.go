package webhooks

import (
	"context"
	"errors"
	"strings"
	"time"
)

// ErrStreamNotFound is returned by a StreamSource for a path with no stream.
var ErrStreamNotFound = errors.New("webhooks: stream not found")

// StreamSource is the engine's read-only view of the host's streams.
//
// The engine calls it from inside Store.UpdateConsumer, so a host must not
// hold a lock that its StreamSource takes while it calls the engine's
// StreamCreated, StreamAppended or StreamDeleted.
type StreamSource interface {
	// Stream describes the stream at path, or returns ErrStreamNotFound.
	// The engine takes any other error for a passing one, as it takes
	// ErrStoreUnavailable: it retries the stream event that needed the
	// read, and its APIs answer 503.
	Stream(ctx context.Context, path string) (StreamInfo, error)
	// MatchStreams returns every existing stream whose path matches pattern.
	MatchStreams(ctx context.Context, pattern *Pattern) ([]StreamInfo, error)
}

// StreamInfo describes one stream as the engine needs it.
type StreamInfo struct {
	Path string
	// Tail is the stream's current Stream-Next-Offset. Offsets are opaque,
	// fixed-width strings that sort in stream order. An empty stream has a
	// tail too, its first offset, which a consumer acks after reading it.
	Tail string
	// Empty is true for a stream with no events yet. A consumer that has
	// acked nothing of an empty stream has no pending work in it (spec 001,
	// Pending Work), so only its creation wakes it. A source that leaves
	// Empty false has such a consumer woken again after every wake cycle
	// while the stream stays empty.
	Empty bool
}

// OffsetValidator is an optional capability of a StreamSource: a source that
// implements it says which offsets its streams could have produced, and the
// engine refuses an ack with any other offset (409 INVALID_OFFSET), so that
// it never stores, and sends back in a notification, an offset the stream
// cannot read from.
//
// Without it the engine applies the protocol's rules: an offset is a
// Stream-Next-Offset header value, so printable ASCII without spaces, with
// none of ',', '&', '=', '?' and '/', and not the reserved "now".
//
// In both cases an acked offset must also have the length of the stream's
// tail, since offsets compare as fixed-width strings, and not be past it.
type OffsetValidator interface {
	// ValidOffset reports whether offset has the form of an offset the
	// host's streams produce. The engine calls it from inside
	// Store.UpdateConsumer, so it should only look at the string. The
	// start offset "-1" is handled by the engine and never passed.
	ValidOffset(offset string) bool
}

// checkOffset checks offset, given in field for the stream at path whose
// tail is tail, as an ack's is checked: OffsetNone, or an offset of the
// tail's length that the source could have produced and that is not past
// the tail. Acks, rewinds and deliver_policy from_offset all go through it.
func checkOffset(source StreamSource, field, path, offset, tail string) error {
	if offset == OffsetNone {
		return nil
	}
	if len(offset) != len(tail) || !validOffset(source, offset) {
		return invalidOffset(field, "offset %q is not an offset of %s", offset, path)
	}
	if compareOffsets(offset, tail) > 0 {
		return invalidOffset(field, "offset %q is beyond the tail %q of %s", offset, tail, path)
	}
	return nil
}

// validOffset reports whether source accepts offset, by the source's own
// rules if it has them and by the protocol's otherwise.
func validOffset(source StreamSource, offset string) bool {
	if v, ok := source.(OffsetValidator); ok {
		return v.ValidOffset(offset)
	}
	if offset == "now" || offset == "" {
		return false
	}
	for i := range len(offset) {
		if c := offset[i]; c <= ' ' || c >= 0x7f || strings.IndexByte(",&=?/", c) >= 0 {
			return false
		}
	}
	return true
}

// EventReader is an optional capability of a StreamSource that event-push
// delivery needs: it reads a stream's events, which the engine sends in
// the body of its POST rather than waking a consumer to read them. The
// engine reads at send time and keeps no events between attempts, so
// whatever a receiver does, no buffer grows per consumer.
type EventReader interface {
	// ReadEvents reads the events of the stream at path from offset from,
	// "-1" for its start, within limit. It returns ErrStreamNotFound if
	// there is no stream at path, and an error if from is not an offset
	// the stream could read from. The events may share memory with the
	// source; the engine does not change them.
	ReadEvents(ctx context.Context, path, from string, limit ReadLimit) (EventBatch, error)
}

// OffsetFinder is an optional capability of a StreamSource that lets an
// operator rewind cursors to a time rather than an offset (RewindParams.At).
type OffsetFinder interface {
	// OffsetAt returns the offset of the last event of the stream at path
	// appended before t, or OffsetNone if there is none, so that rewinding
	// to it delivers again every event appended at t or later. It returns
	// ErrStreamNotFound if there is no stream at path.
	OffsetAt(ctx context.Context, path string, t time.Time) (string, error)
}

// ReadLimit bounds one ReadEvents: at most MaxEvents events of at most
// MaxBytes bytes in all, except that the first event there is comes back
// whatever its size, so that one large event cannot stall a stream, and no
// event at or past the offset Until. Zero means no bound.
type ReadLimit struct {
	MaxEvents int
	MaxBytes  int
	// Until is a tail the stream had: the read stops there even if the
	// stream has grown since, so that reading again from the same offset
	// gives the same events.
	Until string
}

// EventBatch is what one ReadEvents read.
type EventBatch struct {
	// JSON is true for a JSON stream, whose events are its messages, one
	// JSON value each. Other streams have no message boundaries: their one
	// event is the bytes read, cut at MaxBytes.
	JSON bool
	// Events are the events read, in stream order; none at the tail.
	Events [][]byte
	// Offsets, if the source can give them, holds one offset per event:
	// the offset just after it, from which a reader that has processed it
	// reads on. The engine sends them with the events, so that a receiver
	// can checkpoint or acknowledge part of a batch; a source that leaves
	// Offsets nil lets a receiver acknowledge only whole batches.
	Offsets []string
	// Next is the offset just after the last event read, from which to
	// read on. With no event it is the offset read from, or for "-1" the
	// stream's first offset.
	Next string
	// UpToDate is true when Next is the stream's tail.
	UpToDate bool
}

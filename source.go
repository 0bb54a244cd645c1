package webhooks

import (
	"context"
	"errors"
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
}

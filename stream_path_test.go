package webhooks_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/receiver"
)

// The stream paths that patterns could never name: dot and empty segments,
// as ParsePattern refuses them, and bytes that are not UTF-8; and those a
// consumer could not name in a callback.
var refusedStreamPaths = map[string]string{
	"/ctl\x01":  "control character U+0001",
	"/nul\x00":  "control character U+0000",
	"/c1\u0085": "control character U+0085",
	"/" + strings.Repeat("x", webhooks.MaxStreamPathLength): "at most 1024 characters",
	"/agents/../admin/x": `segment ".." is not allowed`,
	"/agents/./y":        `segment "." is not allowed`,
	"/agents//z":         "empty segment",
	"/agents/":           "must not end with '/'",
	"/":                  "has no segments",
	"/agents/..":         `segment ".." is not allowed`,
	"/agents/\xff":       "not valid UTF-8",
	"agents/x":           "must start with '/'",
}

func TestValidateStreamPath(t *testing.T) {
	for path, reason := range refusedStreamPaths {
		err := webhooks.ValidateStreamPath(path)
		var ve *webhooks.ValidationError
		require.ErrorAs(t, err, &ve, "%q", path)
		require.Equal(t, "path", ve.Field)
		require.Contains(t, ve.Reason, reason, "%q", path)
	}
	// Dots are fine inside a segment, and so is any other UTF-8.
	for _, path := range []string{"/a", "/agents/.../x", "/agents/.hidden", "/a./..b", "/%2e%2e", "/ünï/ 😀", "/a*/?{b}",
		"/" + strings.Repeat("x", webhooks.MaxStreamPathLength-1)} {
		require.NoError(t, webhooks.ValidateStreamPath(path), "%q", path)
	}
}

// StreamCreated and StreamAppended refuse a path that no pattern could
// name, with a ValidationError of the path; it gets no consumer, not even
// from "/**" or a subscription made after it.
func TestStreamPathSegmentsRefused(t *testing.T) {
	h := newHarness(t)
	h.subscribe("s1", "/**")
	h.subscribe("s2", "/agents/**")
	for path, reason := range refusedStreamPaths {
		h.source.set(path, 10)
		for name, call := range map[string]func(context.Context, string) error{
			"StreamCreated": h.engine.StreamCreated, "StreamAppended": h.engine.StreamAppended,
		} {
			err := call(context.Background(), path)
			var ve *webhooks.ValidationError
			require.True(t, errors.As(err, &ve), "%s(%q): %v", name, path, err)
			require.Equal(t, "path", ve.Field)
			require.Contains(t, ve.Reason, reason)
		}
		h.subNoConsumer(webhooks.ConsumerID("s1", path))
		h.subNoConsumer(webhooks.ConsumerID("s2", path))
	}
	h.subscribe("s3", "/**")
	for path := range refusedStreamPaths {
		h.subNoConsumer(webhooks.ConsumerID("s3", path))
	}
}

// A consumer can not subscribe itself to such a path either.
func TestCallbackSubscribeRefusesDotSegments(t *testing.T) {
	h := newHarness(t)
	d := h.live()
	for _, path := range []string{"/agents/../admin/x", "/agents/./y", "/agents//z"} {
		r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Subscribe: []string{path}})
		requireError(t, r, http.StatusBadRequest, receiver.CodeInvalidRequest)
		require.True(t, strings.Contains(r.raw, "is not allowed") || strings.Contains(r.raw, "empty segment"), r.raw)
	}
}

package webhooks

import (
	"fmt"
	"net/url"
	"strings"
)

// ConsumerID returns the identity of the consumer that subscription
// subscriptionID spawns for the stream at path:
// "{subscription_id}:{url-encoded stream path}".
func ConsumerID(subscriptionID, path string) string {
	return subscriptionID + ":" + url.PathEscape(path)
}

// ParseConsumerID splits a consumer ID into its subscription ID and stream
// path. It accepts any percent-encoding of the path, so a caller may pass the
// raw segment of a callback URL; ConsumerID of the results is the canonical
// form. The subscription ID and the path must be within
// MaxSubscriptionIDLength and MaxStreamPathLength, and the path free of
// control characters, as those of any consumer the engine creates are.
func ParseConsumerID(id string) (subscriptionID, path string, err error) {
	sub, escaped, ok := strings.Cut(id, ":")
	if !ok {
		return "", "", fmt.Errorf("consumer id %q has no ':'", id)
	}
	if err := ValidateSubscriptionID(sub); err != nil {
		return "", "", fmt.Errorf("consumer id %q: %w", id, err)
	}
	path, err = url.PathUnescape(escaped)
	if err != nil {
		return "", "", fmt.Errorf("consumer id %q: bad stream path encoding", id)
	}
	if !strings.HasPrefix(path, "/") {
		return "", "", fmt.Errorf("consumer id %q: stream path must start with '/'", id)
	}
	if len(path) > MaxStreamPathLength {
		return "", "", fmt.Errorf("consumer id %.64q...: stream path is longer than %d bytes", id, MaxStreamPathLength)
	}
	if r, ok := controlChar(path); ok {
		return "", "", fmt.Errorf("consumer id %q: stream path contains the control character %U", id, r)
	}
	return sub, path, nil
}

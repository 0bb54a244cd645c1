package webhooks

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// The configuration of a subscription of the reserved `__ds` API (the
// upstream Durable Streams protocol, section 6.2), as a PUT gives it.

// The delivery types of a `__ds` subscription.
const (
	dsTypeWebhook  = "webhook"
	dsTypePullWake = "pull-wake"
)

// Bounds of a `__ds` subscription's lease_ttl_ms (section 6.2).
const (
	dsMinLease     = time.Second
	dsMaxLease     = 10 * time.Minute
	dsDefaultLease = 30 * time.Second
)

// dsReservedSegment is the first stream-root-relative segment that the
// protocol reserves for its control APIs.
const dsReservedSegment = "__ds"

// dsSubscriptionRequest is the body of PUT {root}/__ds/subscriptions/:id.
type dsSubscriptionRequest struct {
	Type        string         `json:"type"`
	Pattern     *string        `json:"pattern"`
	Streams     []string       `json:"streams"`
	Webhook     *dsWebhookJSON `json:"webhook"`
	WakeStream  *string        `json:"wake_stream"`
	LeaseTTLMS  *int64         `json:"lease_ttl_ms"`
	Description *string        `json:"description"`
}

// dsWebhookJSON is a webhook subscription's delivery configuration.
type dsWebhookJSON struct {
	URL string `json:"url"`
}

// dsConfig is a `__ds` subscription's normalized configuration: what its
// hash covers. Stream paths are root-relative.
type dsConfig struct {
	Type        string   `json:"type"`
	Pattern     string   `json:"pattern,omitempty"`
	Streams     []string `json:"streams"`
	WebhookURL  string   `json:"webhook_url,omitempty"`
	WakeStream  string   `json:"wake_stream,omitempty"`
	LeaseTTLMS  int64    `json:"lease_ttl_ms"`
	Description string   `json:"description,omitempty"`
}

// hash is the hash of c that re-confirmation compares (section 6.2): of
// its JSON, whose fields have a fixed order and whose streams are sorted.
func (c *dsConfig) hash() string {
	b, err := json.Marshal(c)
	if err != nil { // a struct of strings and ints always marshals
		panic(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// lease is c's lease_ttl_ms as a duration.
func (c *dsConfig) lease() time.Duration { return time.Duration(c.LeaseTTLMS) * time.Millisecond }

// normalize checks req and returns its normalized configuration. check
// validates a webhook URL by the engine's policy; its error is answered
// 400 WEBHOOK_URL_REJECTED.
func (req *dsSubscriptionRequest) normalize(check func(url string) error) (*dsConfig, error) {
	c := &dsConfig{Type: req.Type, LeaseTTLMS: dsDefaultLease.Milliseconds(), Streams: []string{}}
	switch req.Type {
	case dsTypeWebhook:
		if req.Webhook == nil || req.Webhook.URL == "" {
			return nil, invalid("webhook.url", "a webhook subscription needs webhook.url")
		}
		if req.WakeStream != nil {
			return nil, invalid("wake_stream", "wake_stream applies only to type %q", dsTypePullWake)
		}
		if len(req.Webhook.URL) > MaxWebhookURLLength {
			return nil, &dsURLRejected{reason: "the webhook URL is too long"}
		}
		if err := check(req.Webhook.URL); err != nil {
			return nil, &dsURLRejected{reason: "webhook URL rejected: " + err.Error()}
		}
		c.WebhookURL = req.Webhook.URL
	case dsTypePullWake:
		if req.WakeStream == nil || *req.WakeStream == "" {
			return nil, invalid("wake_stream", "a pull-wake subscription needs wake_stream")
		}
		if req.Webhook != nil {
			return nil, invalid("webhook", "webhook applies only to type %q", dsTypeWebhook)
		}
		if err := checkRelativePath("wake_stream", *req.WakeStream); err != nil {
			return nil, err
		}
		c.WakeStream = *req.WakeStream
	default:
		return nil, invalid("type", "type must be %q or %q", dsTypeWebhook, dsTypePullWake)
	}
	if req.Pattern == nil && len(req.Streams) == 0 {
		return nil, invalid("pattern", "a subscription needs a pattern, streams, or both")
	}
	if req.Pattern != nil {
		if _, err := ParsePattern("/" + *req.Pattern); err != nil || *req.Pattern == "" {
			return nil, invalid("pattern", "pattern %.64q is not a glob over stream-root-relative paths", *req.Pattern)
		}
		c.Pattern = *req.Pattern
	}
	for _, p := range req.Streams {
		if err := checkRelativePath("streams", p); err != nil {
			return nil, err
		}
		c.Streams = append(c.Streams, p)
	}
	slices.Sort(c.Streams)
	c.Streams = slices.Compact(c.Streams)
	if req.LeaseTTLMS != nil {
		lease := time.Duration(*req.LeaseTTLMS) * time.Millisecond
		if *req.LeaseTTLMS < dsMinLease.Milliseconds() || *req.LeaseTTLMS > dsMaxLease.Milliseconds() {
			return nil, invalid("lease_ttl_ms", "lease_ttl_ms must be from %d to %d", dsMinLease.Milliseconds(), dsMaxLease.Milliseconds())
		}
		c.LeaseTTLMS = lease.Milliseconds()
	}
	if req.Description != nil {
		c.Description = *req.Description
	}
	return c, nil
}

// checkRelativePath refuses p, given in field, unless it is a
// stream-root-relative stream path outside the reserved namespace.
func checkRelativePath(field, p string) error {
	if p == "" || strings.HasPrefix(p, "/") {
		return invalid(field, "stream path %.64q must be stream-root-relative: not empty, no leading '/'", p)
	}
	if first, _, _ := strings.Cut(p, "/"); first == dsReservedSegment {
		return invalid(field, "stream path %.64q is in the reserved %s namespace", p, dsReservedSegment)
	}
	if err := ValidateStreamPath("/" + p); err != nil {
		return asInvalid(field, err)
	}
	return nil
}

// dsURLRejected refuses a `__ds` webhook URL: 400 WEBHOOK_URL_REJECTED.
type dsURLRejected struct{ reason string }

func (e *dsURLRejected) Error() string { return "webhooks: " + e.reason }

package webhooks

import (
	"fmt"
	"net/textproto"
	"slices"
	"strings"
	"time"

	"github.com/streamhooks/webhooks/receiver"
)

// Event-push options in the subscription API: their JSON, defaults and
// limits. The defaults are those of the change-stream webhooks this mode
// follows (seed 004).
const (
	// DefaultMaxBatchEvents is the default of batch.max_size.
	DefaultMaxBatchEvents = 100
	// DefaultMaxBatchBytes is the default of batch.max_bytes.
	DefaultMaxBatchBytes = 1 << 20
	// DefaultMaxWait is the default of batch.max_wait_ms.
	DefaultMaxWait = time.Second
	// DefaultMaxAttempts is the default of retry.max_attempts for event
	// push.
	DefaultMaxAttempts = 5
)

// Limits on event-push options; a request past one is refused with 400
// INVALID_REQUEST and a message naming the limit.
const (
	maxBatchEventsLimit  = 10_000
	maxBatchBytesLimit   = 16 << 20
	maxWaitLimit         = time.Minute
	maxPushTimeoutLimit  = 5 * time.Minute
	maxCustomHeaders     = 32
	maxCustomHeaderBytes = 8 << 10
)

// redactedHeader stands for a custom header's value in API responses.
const redactedHeader = "[redacted]"

// batchJSON is the "batch" object. In a request a missing field takes its
// default; a response shows every field.
type batchJSON struct {
	MaxSize   *int   `json:"max_size,omitempty"`
	MaxBytes  *int   `json:"max_bytes,omitempty"`
	MaxWaitMS *int64 `json:"max_wait_ms,omitempty"`
}

// filterJSON is the "filter" object.
type filterJSON struct {
	Field      string   `json:"field,omitempty"`
	Patterns   []string `json:"patterns,omitempty"`
	Expression string   `json:"expression,omitempty"`
}

// pushJSON holds the event-push fields of a subscription request or
// response.
type pushJSON struct {
	Batch     *batchJSON        `json:"batch,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
	TimeoutMS *int64            `json:"timeout_ms,omitempty"`
	Filter    *filterJSON       `json:"filter,omitempty"`
	// Columns given replace them; [] sends events whole again.
	Columns []string `json:"columns,omitempty"`
}

func (p *pushJSON) empty() bool {
	return p.field() == ""
}

// field is the JSON name of the first option p gives, or "" if none.
func (p *pushJSON) field() string {
	switch {
	case p.Batch != nil:
		return "batch"
	case p.Headers != nil:
		return "headers"
	case p.TimeoutMS != nil:
		return "timeout_ms"
	case p.Filter != nil:
		return "filter"
	case p.Columns != nil:
		return "columns"
	}
	return ""
}

// applyTo sets the event-push options p gives on ev, over what ev has.
func (p *pushJSON) applyTo(ev *EventsOptions) error {
	if b := p.Batch; b != nil {
		if b.MaxSize != nil {
			ev.MaxBatchEvents = *b.MaxSize
		}
		if b.MaxBytes != nil {
			ev.MaxBatchBytes = *b.MaxBytes
		}
		if b.MaxWaitMS != nil {
			d, err := millis("batch.max_wait_ms", *b.MaxWaitMS)
			if err != nil {
				return err
			}
			ev.MaxWait = d
		}
	}
	if p.TimeoutMS != nil {
		if *p.TimeoutMS < 1 {
			return invalid("timeout_ms", "timeout_ms must be 1 to %d", maxPushTimeoutLimit.Milliseconds())
		}
		d, err := millis("timeout_ms", *p.TimeoutMS)
		if err != nil {
			return err
		}
		ev.Timeout = d
	}
	if p.Headers != nil {
		headers, err := customHeaders(p.Headers)
		if err != nil {
			return asInvalid("headers", err)
		}
		ev.Headers = headers
	}
	if f := p.Filter; f != nil {
		ev.Filter = &EventFilter{Field: f.Field, Patterns: f.Patterns, Expression: f.Expression}
	}
	if p.Columns != nil {
		ev.Columns = nil
		if len(p.Columns) > 0 {
			ev.Columns = p.Columns
		}
	}
	return nil
}

// defaultEventsOptions are the options of an events subscription that
// sets none.
func defaultEventsOptions() *EventsOptions {
	return &EventsOptions{MaxBatchEvents: DefaultMaxBatchEvents, MaxBatchBytes: DefaultMaxBatchBytes, MaxWait: DefaultMaxWait}
}

// validateEventsOptions checks ev against the API's limits, naming each
// option by its JSON field.
func validateEventsOptions(ev *EventsOptions) error {
	if ev.MaxBatchEvents < 1 || ev.MaxBatchEvents > maxBatchEventsLimit {
		return invalid("batch.max_size", "batch.max_size must be 1 to %d", maxBatchEventsLimit)
	}
	if ev.MaxBatchBytes < 1 || ev.MaxBatchBytes > maxBatchBytesLimit {
		return invalid("batch.max_bytes", "batch.max_bytes must be 1 to %d", maxBatchBytesLimit)
	}
	if ev.MaxWait < 0 || ev.MaxWait > maxWaitLimit {
		return invalid("batch.max_wait_ms", "batch.max_wait_ms must be 0 to %d", maxWaitLimit.Milliseconds())
	}
	if ev.Timeout < 0 || ev.Timeout > maxPushTimeoutLimit {
		return invalid("timeout_ms", "timeout_ms must be 1 to %d", maxPushTimeoutLimit.Milliseconds())
	}
	if _, err := customHeaders(ev.Headers); err != nil {
		return asInvalid("headers", err)
	}
	if ev.Filter != nil {
		if _, err := compileFilter(ev.Filter); err != nil {
			return asInvalid("filter", err)
		}
	}
	if _, err := compileColumns(ev.Columns); err != nil {
		return err
	}
	return nil
}

// reservedHeaders are set by the engine or by HTTP itself; a subscription
// may not set them.
var reservedHeaders = []string{
	"Connection", "Content-Encoding", "Content-Length", "Content-Type", "Expect", "Host",
	"Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "User-Agent",
	receiver.IDHeader, receiver.TimestampHeader, receiver.SignatureHeader,
}

// customHeaders validates a subscription's custom headers and returns
// them under their canonical names.
func customHeaders(in map[string]string) (map[string]string, error) {
	if len(in) == 0 {
		return nil, nil
	}
	if len(in) > maxCustomHeaders {
		return nil, fmt.Errorf("headers has more than %d headers", maxCustomHeaders)
	}
	out := make(map[string]string, len(in))
	size := 0
	for name, value := range in {
		if !validHeaderName(name) {
			return nil, fmt.Errorf("headers: %q is not a valid header name", name)
		}
		canon := textproto.CanonicalMIMEHeaderKey(name)
		if slices.Contains(reservedHeaders, canon) {
			return nil, fmt.Errorf("headers: %s is set by the engine or HTTP and cannot be set", canon)
		}
		if _, dup := out[canon]; dup {
			return nil, fmt.Errorf("headers: %s is given twice", canon)
		}
		if strings.ContainsFunc(value, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
			return nil, fmt.Errorf("headers: the value of %s has a control character", canon)
		}
		size += len(canon) + len(value)
		out[canon] = value
	}
	if size > maxCustomHeaderBytes {
		return nil, fmt.Errorf("headers are larger than %d bytes in all", maxCustomHeaderBytes)
	}
	return out, nil
}

// validHeaderName reports whether name is an HTTP token (RFC 9110, 5.6.2).
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := range len(name) {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// pushView is how the API shows ev: every option, and the custom headers'
// names with their values redacted.
func pushView(ev *EventsOptions) pushJSON {
	size, bytes, wait := ev.MaxBatchEvents, ev.MaxBatchBytes, ev.MaxWait.Milliseconds()
	out := pushJSON{
		Batch: &batchJSON{MaxSize: &size, MaxBytes: &bytes, MaxWaitMS: &wait},
	}
	if ev.Timeout > 0 {
		ms := ev.Timeout.Milliseconds()
		out.TimeoutMS = &ms
	}
	if len(ev.Headers) > 0 {
		out.Headers = make(map[string]string, len(ev.Headers))
		for name := range ev.Headers {
			out.Headers[name] = redactedHeader
		}
	}
	if f := ev.Filter; f != nil {
		out.Filter = &filterJSON{Field: f.Field, Patterns: f.Patterns, Expression: f.Expression}
	}
	out.Columns = ev.Columns
	return out
}

// errNoEventReader refuses an events subscription on a host whose streams
// the engine cannot read.
func errNoEventReader() error {
	return invalid("delivery",
		"delivery %q needs a stream source that can read events, and this server's cannot", DeliveryEvents)
}

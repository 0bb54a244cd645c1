// Package inbox receives third-party webhooks without losing one. Its
// Handler appends each delivery, with its raw body, to the provider's inbox
// stream before it answers, so that a sender is told 2xx only for a delivery
// that is durable. It checks the request's structure only; a processor
// reads the records later and checks each signature, with the provider's
// Scheme, on exactly the bytes that were received.
//
// The Handler does not depend on the webhook engine: any host that can
// append to a stream (an Appender) can mount it. The Processor is the
// engine's in-process consumer of the inbox streams (see Processor).
package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/benbjohnson/clock"
)

// Defaults used when no option says otherwise.
const (
	// DefaultMaxBodyBytes bounds a delivery's body; a larger one gets 413.
	DefaultMaxBodyBytes int64 = 1 << 20
	// DefaultDedupWindow is how long a delivery id is remembered.
	DefaultDedupWindow = 24 * time.Hour
	// DefaultDedupCapacity is how many delivery ids are remembered at most,
	// in about 9 MiB; the oldest are forgotten first.
	DefaultDedupCapacity = 100_000
)

// retryAfter is the Retry-After of a 503, in seconds.
const retryAfter = "5"

// Appender is the host's capability to append to a stream.
type Appender interface {
	// Append appends record, one JSON object, to stream as one message, and
	// returns once it is durable. An error means it may not be: the
	// delivery is then refused, so that its sender retries. The host
	// creates each provider's stream, as a JSON stream, before the first
	// delivery.
	Append(ctx context.Context, stream string, record []byte) error
}

// AppenderFunc adapts a function to an Appender.
type AppenderFunc func(ctx context.Context, stream string, record []byte) error

// Append calls f.
func (f AppenderFunc) Append(ctx context.Context, stream string, record []byte) error {
	return f(ctx, stream, record)
}

// Provider is a sender of webhooks the Handler accepts.
type Provider struct {
	// Name is the last segment of the provider's inbox URL path, and the
	// Provider of its records: letters, digits, '-', '_' and '.'.
	Name string
	// Scheme is how the provider identifies and signs deliveries.
	Scheme Scheme
	// Stream is the inbox stream of the provider's records; empty means
	// "/inbox/{Name}/records".
	Stream string
	// DeadStream is where a Processor appends the provider's dead letters;
	// empty means "/inbox/{Name}/dead".
	DeadStream string
	// Status answers a delivery once it is durable, and its duplicates:
	// a 2xx, http.StatusAccepted if zero. Set http.StatusOK for a provider
	// that accepts nothing else.
	Status int
}

// Record is what the Handler appends, as JSON, for each delivery.
type Record struct {
	// Provider is the Name of the provider the delivery came to.
	Provider string `json:"provider"`
	// DeliveryID is the provider's id of the delivery, empty if it gave
	// none. A provider sends a delivery again when it is unsure that it was
	// received, and the Handler's deduplication is only per process and
	// within a window, so a processor must also skip ids it has processed.
	DeliveryID string `json:"delivery_id,omitempty"`
	// ReceivedAt is when the Handler received the delivery, by the
	// server's clock. Verification checks signed timestamps against it,
	// not against the time of processing, so that a record still verifies
	// after a processor outage. The Processor trusts it, as every field:
	// the host must let no one but the Handler and Replay append to a
	// provider's stream, or anyone could have an old, captured delivery
	// processed by appending it with a fresh ReceivedAt.
	ReceivedAt time.Time `json:"received_at"`
	// Header holds the request's Content-Type and the headers the Scheme
	// names, under canonical keys; never credentials such as Authorization
	// or Cookie.
	Header http.Header `json:"header"`
	// Body is the request body exactly as received, base64 in JSON so that
	// any bytes survive.
	Body []byte `json:"body"`
	// Path is the request's URL path below the provider's segment, e.g.
	// "/org/acme" for a delivery to /inbox/github/org/acme; empty for one
	// to the provider's own URL. It is routing metadata, such as a user or
	// a webhook's name, that the sender put in the URL.
	Path string `json:"path,omitempty"`
	// Query is the request's raw query, without '?', as received. Senders
	// that sign a URL, or put a token in it, have it recorded too: the
	// inbox's streams must be as private as its secrets.
	Query string `json:"query,omitempty"`
	// Replay is empty for a record the Handler appended, and a fresh id for
	// one that Processor.Replay appended again: a new record, which the
	// processor's note of the one it replays never covers.
	Replay string `json:"replay,omitempty"`
}

// credentialHeaders are never recorded, whatever a Scheme names.
var credentialHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie"}

// Handler is the inbox's HTTP front door. It serves every provider given to
// New, each at a URL path with the segment "/{Name}", so it is mounted
// once, e.g. under "/inbox/"; paths with no provider's segment get 404.
// The leftmost segment that names a provider picks it, and the rest of the
// path, and the query, are the record's Path and Query: so the mount's own
// segments must name no provider. Each POST whose body is within the
// limit is appended to the provider's stream as a Record and answered with
// the provider's Status; a duplicate of a delivery appended within the
// dedup window gets that answer without being appended again. Duplicates
// remembered by another process or before a restart, or that arrive while
// the first is being appended, are appended again, so processing must be
// idempotent by Record.DeliveryID too.
type Handler struct {
	appender  Appender
	providers map[string]*provider
	maxBody   int64
	clock     clock.Clock
	log       *slog.Logger
	seen      *dedup
	daily     bool
}

// provider is a Provider with its defaults resolved.
type provider struct {
	name    string
	scheme  Scheme
	stream  string
	dead    string
	status  int
	headers []string // canonical, Content-Type first
}

// Option configures a Handler; pass options to New.
type Option func(*options)

type options struct {
	maxBody     int64
	clock       clock.Clock
	log         *slog.Logger
	dedupWindow time.Duration
	dedupCap    int
	daily       bool
}

// WithMaxBodyBytes bounds a delivery's body; a larger one gets 413.
// The default is DefaultMaxBodyBytes.
func WithMaxBodyBytes(n int64) Option { return func(o *options) { o.maxBody = n } }

// WithClock sets the clock that stamps ReceivedAt and ages delivery ids;
// the default is the wall clock.
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

// WithLogger sets where failed appends are logged; the default is
// slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithDedup sets how long delivery ids are remembered and how many at most;
// the defaults are DefaultDedupWindow and DefaultDedupCapacity. A window or
// capacity of zero turns deduplication off.
func WithDedup(window time.Duration, capacity int) Option {
	return func(o *options) { o.dedupWindow, o.dedupCap = window, capacity }
}

// WithDailyPartitions appends records, and a Processor's dead letters,
// to daily partitions of their streams, "{Stream}/{yyyy-mm-dd}" by the
// clock's UTC day, so that a Sweep can delete whole partitions past their
// retention. The Appender then creates a missing partition, as a JSON
// stream, on its first append, and the engine's subscription must match
// the partitions, e.g. "/inbox/*/records/**", which matches an
// unpartitioned stream too: a Processor reads both, so a host can turn
// partitions on over existing streams.
func WithDailyPartitions() Option { return func(o *options) { o.daily = true } }

// New returns a Handler that appends deliveries to appender, for the
// providers given. It refuses a provider without a valid Name or a Scheme,
// with a Status that is not 2xx, whose Scheme names a credential header, or
// whose StandardWebhooks secret is set but not base64 after "whsec_".
func New(appender Appender, providers []Provider, opts ...Option) (*Handler, error) {
	if appender == nil {
		return nil, errors.New("inbox: nil Appender")
	}
	o := options{maxBody: DefaultMaxBodyBytes, dedupWindow: DefaultDedupWindow, dedupCap: DefaultDedupCapacity}
	for _, opt := range opts {
		opt(&o)
	}
	if o.maxBody <= 0 {
		return nil, errors.New("inbox: the body limit must be positive")
	}
	if o.dedupWindow < 0 || o.dedupCap < 0 {
		return nil, errors.New("inbox: the dedup window and capacity must not be negative")
	}
	if o.clock == nil {
		o.clock = clock.New()
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	h := &Handler{
		appender:  appender,
		providers: make(map[string]*provider, len(providers)),
		maxBody:   o.maxBody,
		clock:     o.clock,
		log:       o.log,
		daily:     o.daily,
	}
	if o.dedupWindow > 0 && o.dedupCap > 0 {
		h.seen = newDedup(o.dedupWindow, o.dedupCap)
	}
	for _, p := range providers {
		resolved, err := resolve(p)
		if err != nil {
			return nil, err
		}
		if _, dup := h.providers[p.Name]; dup {
			return nil, fmt.Errorf("inbox: provider %q given twice", p.Name)
		}
		h.providers[p.Name] = resolved
	}
	return h, nil
}

// secretChecker is a Scheme whose secret, if set, has a format to check
// before the first record: a malformed one would set every record aside.
type secretChecker interface {
	checkSecret() error
}

// resolve checks p and fills in its defaults.
func resolve(p Provider) (*provider, error) {
	if !validName(p.Name) {
		return nil, fmt.Errorf("inbox: provider name %q: want letters, digits, '-', '_' or '.'", p.Name)
	}
	if p.Scheme == nil {
		return nil, fmt.Errorf("inbox: provider %q has no Scheme", p.Name)
	}
	r := &provider{name: p.Name, scheme: p.Scheme, stream: p.Stream, dead: p.DeadStream, status: p.Status}
	if r.stream == "" {
		r.stream = "/inbox/" + p.Name + "/records"
	}
	if r.dead == "" {
		r.dead = "/inbox/" + p.Name + "/dead"
	}
	if r.status == 0 {
		r.status = http.StatusAccepted
	}
	if r.status < 200 || r.status > 299 {
		return nil, fmt.Errorf("inbox: provider %q: status %d is not 2xx", p.Name, r.status)
	}
	if c, ok := p.Scheme.(secretChecker); ok {
		if err := c.checkSecret(); err != nil {
			return nil, fmt.Errorf("inbox: provider %q: its secret %w", p.Name, err)
		}
	}
	r.headers = []string{"Content-Type"}
	for _, name := range p.Scheme.Headers() {
		name = http.CanonicalHeaderKey(name)
		switch {
		case name == "":
			return nil, fmt.Errorf("inbox: provider %q: its Scheme names an empty header", p.Name)
		case slices.Contains(credentialHeaders, name):
			return nil, fmt.Errorf("inbox: provider %q: %s is a credential and is never recorded", p.Name, name)
		case !slices.Contains(r.headers, name):
			r.headers = append(r.headers, name)
		}
	}
	return r, nil
}

func validName(s string) bool {
	if s == "" || s == "." || s == ".." {
		return false
	}
	for _, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			return false
		}
	}
	return true
}

// ServeHTTP receives one delivery.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, below := h.route(r.URL.Path)
	if p == nil {
		writeError(w, http.StatusNotFound, codeProviderNotFound, "no inbox provider at this path")
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, codeInvalidRequest, "deliveries must use POST")
		return
	}
	body, status := h.readBody(w, r)
	if status != 0 {
		if status == http.StatusRequestEntityTooLarge {
			writeError(w, status, codeInvalidRequest, fmt.Sprintf("the body exceeds %d bytes", h.maxBody))
		} else {
			writeError(w, status, codeInvalidRequest, "cannot read the request body")
		}
		return
	}
	id := p.scheme.DeliveryID(r.Header, body)
	now := h.clock.Now()
	if id != "" && h.seen != nil && h.seen.has(p.name, id, h.clock.Now()) {
		w.WriteHeader(p.status)
		return
	}
	header := keep(r.Header, p.headers)
	if s, ok := p.scheme.(headerSealer); ok {
		s.sealHeaders(header)
	}
	record, err := json.Marshal(Record{
		Provider:   p.name,
		DeliveryID: id,
		ReceivedAt: now.UTC(),
		Header:     header,
		Body:       body,
		Path:       below,
		Query:      r.URL.RawQuery,
	})
	stream := p.stream
	if h.daily {
		stream = partition(stream, now)
	}
	if err == nil {
		err = h.appender.Append(r.Context(), stream, record)
	}
	if err != nil {
		h.log.ErrorContext(r.Context(), "inbox: appending a delivery failed",
			"provider", p.name, "delivery_id", id, "stream", stream, "error", err)
		w.Header().Set("Retry-After", retryAfter)
		writeError(w, http.StatusServiceUnavailable, codeServiceUnavailable, "the delivery could not be stored; retry later")
		return
	}
	if id != "" && h.seen != nil {
		h.seen.add(p.name, id, h.clock.Now())
	}
	w.WriteHeader(p.status)
}

// route returns the provider of the leftmost segment of path that names
// one, and the rest of path after that segment, or nil.
func (h *Handler) route(path string) (*provider, string) {
	for rest := path; rest != ""; {
		var seg string
		seg, rest, _ = strings.Cut(strings.TrimPrefix(rest, "/"), "/")
		if p := h.providers[seg]; p != nil {
			if rest != "" {
				rest = "/" + rest
			}
			return p, rest
		}
	}
	return nil, ""
}

// readBody reads the body within the limit, or returns the status to
// answer instead.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, int) {
	if r.ContentLength > h.maxBody {
		return nil, http.StatusRequestEntityTooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, http.StatusRequestEntityTooLarge
	case err != nil:
		return nil, http.StatusBadRequest
	}
	return body, 0
}

// headerSealer is a Scheme whose kept headers hold a credential: the
// Handler lets it replace the credential with what Verify needs to check
// it, before the record is stored.
type headerSealer interface {
	sealHeaders(h http.Header)
}

// keep returns the values of the named headers that h has.
func keep(h http.Header, names []string) http.Header {
	kept := make(http.Header, len(names))
	for _, name := range names {
		if v := h.Values(name); len(v) > 0 {
			kept[name] = v
		}
	}
	return kept
}

// Error codes, in the webhook engine's error shape.
const (
	codeInvalidRequest     = "INVALID_REQUEST"
	codeProviderNotFound   = "PROVIDER_NOT_FOUND"
	codeServiceUnavailable = "SERVICE_UNAVAILABLE"
	codeDeadLetterNotFound = "DEAD_LETTER_NOT_FOUND"
	codeInternal           = "INTERNAL_ERROR"
)

// errorResponse is the one JSON error shape, the webhook engine's:
// {"ok":false,"error":{"code":...,"message":...}}.
type errorResponse struct {
	OK    bool `json:"ok"`
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	var resp errorResponse
	resp.Error.Code, resp.Error.Message = code, message
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(resp)
}

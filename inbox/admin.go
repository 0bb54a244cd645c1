package inbox

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	webhooks "github.com/streamhooks/webhooks"
)

// Status is where a record stands.
type Status string

// The statuses an Admin lists.
const (
	// StatusPending is a record the processor's cursor has not passed.
	StatusPending Status = "pending"
	// StatusDone is a record the cursor has passed: processed, skipped as
	// a duplicate, or set aside as a dead letter (listed under StatusDead
	// too).
	StatusDone Status = "done"
	// StatusDead is a dead letter, as its provider's dead-letter stream
	// holds it.
	StatusDead Status = "dead"
)

// Page lengths of an Admin's listing.
const (
	// DefaultPageLength is the listing handler's limit if none is given.
	DefaultPageLength = 50
	// MaxPageLength is the most a page holds.
	MaxPageLength = 500
)

// ErrNotFound is returned for a provider, or a dead letter, that is not
// there.
var ErrNotFound = errors.New("inbox: not found")

// ErrBadOffset is returned for a position (an Entry's At, a Page's Next)
// that names no offset of the provider's stream that it can be read from.
var ErrBadOffset = errors.New("inbox: not an offset of the stream")

// checkOffset returns ErrBadOffset for an offset the reader says is
// malformed.
func (a *Admin) checkOffset(offset string) error {
	if v, ok := a.streams.(webhooks.OffsetValidator); ok && offset != webhooks.OffsetNone && !v.ValidOffset(offset) {
		return fmt.Errorf("%w: %q", ErrBadOffset, offset)
	}
	return nil
}

// Cursor returns the offset up to which the processor's subscription has
// acknowledged the records stream at stream: webhooks.OffsetNone if
// nothing, or if the subscription has no consumer of it yet.
type Cursor func(ctx context.Context, stream string) (string, error)

// Admin is an operator's view of a Processor's records: it lists them by
// Status and replays dead letters named by delivery id or by position,
// reading each from its dead-letter stream, so that only what the
// Processor set aside is ever replayed.
//
// Status comes from the streams, not from memory: a record is pending or
// done by where it stands against the engine's durable cursor (Cursor) on
// its stream, and dead by being in the dead-letter stream. A provider's
// stream is read whole: the unpartitioned one first, then its partitions
// (WithDailyPartitions) by day. Offsets are compared as strings, which the
// Durable Streams protocol makes sortable.
type Admin struct {
	p       *Processor
	streams Streams
	cursor  Cursor
}

// Admin returns the Admin of p's records, read from streams, whose status
// cursor gives.
func (p *Processor) Admin(streams Streams, cursor Cursor) *Admin {
	return &Admin{p: p, streams: streams, cursor: cursor}
}

// Entry is one listed record, or dead letter.
type Entry struct {
	// At is where it is, for a listing's from and for ReplayAt; Stream and
	// Offset say the same for a reader of the stream.
	At     string `json:"at"`
	Stream string `json:"stream"`
	Offset string `json:"offset"`
	Status Status `json:"status"`
	// Record is the record, or for StatusDead the dead letter; nil for an
	// event that does not decode, whose bytes Raw holds.
	Record *DeadLetter     `json:"record,omitempty"`
	Raw    json.RawMessage `json:"raw,omitempty"`
}

// Page is a page of a listing: Next, if set, is the from of the next one.
type Page struct {
	Entries []Entry `json:"entries"`
	Next    string  `json:"next,omitempty"`
}

// position is an opaque token of a stream and an offset in it.
func position(stream, offset string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(stream + "\n" + offset))
}

// parsePosition returns the stream and offset of at, one of base's.
func (a *Admin) parsePosition(base, at string) (string, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(at)
	stream, offset, ok := strings.Cut(string(raw), "\n")
	if err != nil || !ok || !holds(base, stream) || offset == "" {
		return "", "", fmt.Errorf("%w: %q", ErrBadOffset, at)
	}
	if err := a.checkOffset(offset); err != nil {
		return "", "", err
	}
	return stream, offset, nil
}

// List returns up to limit (at most MaxPageLength) of provider's entries
// of status, from position from (an Entry's At, or a Page's Next) or the
// start if from is "": the records after the cursor for StatusPending, up
// to it for StatusDone, and the dead letters for StatusDead.
func (a *Admin) List(ctx context.Context, provider string, status Status, from string, limit int) (*Page, error) {
	prov := a.p.providers[provider]
	if prov == nil {
		return nil, fmt.Errorf("%w: provider %q", ErrNotFound, provider)
	}
	if status != StatusPending && status != StatusDone && status != StatusDead {
		return nil, fmt.Errorf("inbox: no status %q: want pending, done or dead", status)
	}
	limit = min(max(limit, 1), MaxPageLength)
	base := prov.stream
	if status == StatusDead {
		base = prov.dead
	}
	startStream, startOffset := "", webhooks.OffsetNone
	if from != "" {
		var err error
		if startStream, startOffset, err = a.parsePosition(base, from); err != nil {
			return nil, err
		}
	}
	found, err := parts(ctx, a.streams, base)
	if err != nil {
		return nil, err
	}
	page := &Page{Entries: []Entry{}}
	for _, s := range found {
		offset := webhooks.OffsetNone
		switch { // in path order, which parts keeps: a stream sorts before its partitions
		case s.Path < startStream:
			continue
		case s.Path == startStream:
			offset = startOffset
		}
		next, err := a.list(ctx, page, prov, s.Path, status, offset, limit)
		if err != nil {
			return nil, err
		}
		if next != "" {
			page.Next = position(s.Path, next)
			return page, nil
		}
	}
	return page, nil
}

// list adds to page the entries of status in stream from offset, up to
// limit, and returns the offset to go on from if page is full.
func (a *Admin) list(ctx context.Context, page *Page, prov *provider, stream string, status Status, from string, limit int) (string, error) {
	until := ""
	if status != StatusDead {
		cur, err := a.cursor(ctx, stream)
		if err != nil {
			return "", err
		}
		if status == StatusDone {
			until = cur
		} else if from < cur { // "-1" sorts before every offset
			from = cur
		}
	}
	for {
		if until != "" && from >= until { // done: up to the cursor
			return "", nil
		}
		if len(page.Entries) == limit {
			return from, nil
		}
		b, err := a.streams.ReadEvents(ctx, stream, from, webhooks.ReadLimit{MaxEvents: 1})
		if errors.Is(err, webhooks.ErrStreamNotFound) {
			return "", nil // deleted meanwhile
		}
		if err != nil {
			return "", err
		}
		if len(b.Events) == 0 {
			return "", nil
		}
		e := Entry{At: position(stream, from), Stream: stream, Offset: from, Status: status}
		var d DeadLetter
		switch {
		case json.Unmarshal(b.Events[0], &d) != nil:
			e.Raw = append(json.RawMessage(nil), b.Events[0]...)
		case d.Provider == prov.name:
			e.Record = &d
		case status != StatusDead:
			e.Raw = append(json.RawMessage(nil), b.Events[0]...)
		}
		if e.Record != nil || e.Raw != nil { // not another provider's dead letter
			page.Entries = append(page.Entries, e)
		}
		from = b.Next
		if b.UpToDate {
			return "", nil
		}
	}
}

// Replay replays provider's latest dead letter of the delivery deliveryID,
// as read from its dead-letter stream (Processor.Replay); ErrNotFound if
// there is none.
func (a *Admin) Replay(ctx context.Context, provider, deliveryID string) error {
	prov := a.p.providers[provider]
	if prov == nil || deliveryID == "" {
		return ErrNotFound
	}
	found, err := parts(ctx, a.streams, prov.dead)
	if err != nil {
		return err
	}
	for i := len(found) - 1; i >= 0; i-- { // the newest partition first
		var last []byte
		from := webhooks.OffsetNone
		for {
			b, err := a.streams.ReadEvents(ctx, found[i].Path, from, webhooks.ReadLimit{MaxEvents: 1000})
			if errors.Is(err, webhooks.ErrStreamNotFound) {
				break
			}
			if err != nil {
				return err
			}
			for _, ev := range b.Events {
				var d DeadLetter
				if json.Unmarshal(ev, &d) == nil && d.Provider == provider && d.DeliveryID == deliveryID && d.Raw == nil {
					last = ev
				}
			}
			if b.UpToDate || len(b.Events) == 0 {
				break
			}
			from = b.Next
		}
		if last != nil {
			return a.p.Replay(ctx, last)
		}
	}
	return ErrNotFound
}

// ReplayAt replays the dead letter of provider at position at (an Entry's
// At), for one whose record has no delivery id; ErrNotFound if there is
// none there.
func (a *Admin) ReplayAt(ctx context.Context, provider, at string) error {
	prov := a.p.providers[provider]
	if prov == nil || at == "" {
		return ErrNotFound
	}
	stream, offset, err := a.parsePosition(prov.dead, at)
	if err != nil {
		return err
	}
	b, err := a.streams.ReadEvents(ctx, stream, offset, webhooks.ReadLimit{MaxEvents: 1})
	if errors.Is(err, webhooks.ErrStreamNotFound) || err == nil && len(b.Events) == 0 {
		return ErrNotFound
	}
	if err != nil {
		// A reader tells no offset it never gave from a failure: the
		// operator's offset is taken for the cause.
		return fmt.Errorf("%w: %q: %v", ErrBadOffset, at, err)
	}
	var d DeadLetter
	if json.Unmarshal(b.Events[0], &d) != nil || d.Provider != provider {
		return ErrNotFound
	}
	return a.p.Replay(ctx, b.Events[0])
}

// Handler returns an operator's http.Handler of provider's records, which
// the host mounts behind its own operator authentication:
//   - GET ?status=pending|done|dead[&from=offset][&limit=n]: 200 with a
//     Page as JSON; 400 for another status or limit;
//   - POST ?replay={delivery_id}, or ?at={position} (an Entry's At): 200 {"ok":true} once the dead letter's record is appended
//     again (Replay, ReplayAt); 404 if there is no such dead letter; 400
//     for a malformed offset, or a dead letter that holds no record; 503
//     if the append fails.
//
// A request body is never read: only what the dead-letter stream holds is
// replayed.
func (a *Admin) Handler(provider string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			a.serveList(w, r, provider, q)
		case http.MethodPost:
			a.serveReplay(w, r, provider, q)
		default:
			w.Header().Set("Allow", "GET, HEAD, POST")
			writeError(w, http.StatusMethodNotAllowed, codeInvalidRequest, "list with GET, replay with POST")
		}
	})
}

func (a *Admin) serveList(w http.ResponseWriter, r *http.Request, provider string, q map[string][]string) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	limit := DefaultPageLength
	if s := get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPageLength {
			writeError(w, http.StatusBadRequest, codeInvalidRequest, fmt.Sprintf("limit must be from 1 to %d", MaxPageLength))
			return
		}
		limit = n
	}
	status := Status(get("status"))
	if status != StatusPending && status != StatusDone && status != StatusDead {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "status must be pending, done or dead")
		return
	}
	page, err := a.List(r.Context(), provider, status, get("from"), limit)
	switch {
	case errors.Is(err, ErrBadOffset):
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "from is not a position in the stream")
		return
	case errors.Is(err, ErrNotFound):
		writeError(w, http.StatusNotFound, codeProviderNotFound, "no provider "+provider)
		return
	case err != nil:
		a.p.log.ErrorContext(r.Context(), "inbox: listing records failed", "provider", provider, "status", status, "error", err)
		writeError(w, http.StatusInternalServerError, codeInternal, "the records could not be listed")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(page)
}

func (a *Admin) serveReplay(w http.ResponseWriter, r *http.Request, provider string, q map[string][]string) {
	id, at := "", ""
	if v := q["replay"]; len(v) > 0 {
		id = v[0]
	}
	if v := q["at"]; len(v) > 0 {
		at = v[0]
	}
	var err error
	switch {
	case id != "" && at == "":
		err = a.Replay(r.Context(), provider, id)
	case id == "" && at != "":
		err = a.ReplayAt(r.Context(), provider, at)
	default:
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "name the dead letter: ?replay={delivery_id} or ?at={position}")
		return
	}
	switch {
	case errors.Is(err, ErrNotFound):
		writeError(w, http.StatusNotFound, codeDeadLetterNotFound, "no such dead letter")
		return
	case errors.Is(err, ErrBadOffset):
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "at is not a position in the dead-letter stream")
		return
	case errors.Is(err, errNotARecord):
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "the dead letter holds an event that was never a record")
		return
	case err != nil:
		a.p.log.ErrorContext(r.Context(), "inbox: replaying a dead letter failed", "provider", provider, "delivery_id", id, "at", at, "error", err)
		w.Header().Set("Retry-After", retryAfter)
		writeError(w, http.StatusServiceUnavailable, codeServiceUnavailable, "the record could not be stored again; retry later")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"ok":true}`+"\n")
}

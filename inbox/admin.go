package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

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
	DefaultPageLength = 50
	MaxPageLength     = 500
)

// ErrNotFound is returned for a provider, or a dead letter, that is not
// there.
var ErrNotFound = errors.New("inbox: not found")

// ErrBadOffset is returned for an offset that the reader cannot read
// from: one it did not give, or, if it is a webhooks.OffsetValidator, one
// of another form.
var ErrBadOffset = errors.New("inbox: not an offset of the stream")

// checkOffset returns ErrBadOffset for an offset the reader says is
// malformed.
func (a *Admin) checkOffset(offset string) error {
	if v, ok := a.reader.(webhooks.OffsetValidator); ok && offset != webhooks.OffsetNone && !v.ValidOffset(offset) {
		return fmt.Errorf("%w: %q", ErrBadOffset, offset)
	}
	return nil
}

// Cursor returns the offset up to which the processor's subscription has
// acknowledged the records stream at stream: webhooks.OffsetNone if
// nothing, or if the subscription has no consumer of it yet.
type Cursor func(ctx context.Context, stream string) (string, error)

// Admin is an operator's view of a Processor's records: it lists them by
// Status and replays dead letters named by delivery id or by offset,
// reading each from its dead-letter stream, so that only what the
// Processor set aside is ever replayed.
//
// Status comes from the streams, not from memory: a record is pending or
// done by where it stands against the engine's durable cursor (Cursor),
// and dead by being in the dead-letter stream. Offsets are compared as
// strings, which the Durable Streams protocol makes sortable.
type Admin struct {
	p      *Processor
	reader webhooks.EventReader
	cursor Cursor
}

// Admin returns the Admin of p's records, read with reader, whose status
// cursor gives.
func (p *Processor) Admin(reader webhooks.EventReader, cursor Cursor) *Admin {
	return &Admin{p: p, reader: reader, cursor: cursor}
}

// Entry is one listed record, or dead letter.
type Entry struct {
	// Stream and Offset are where it is: the offset it is read from.
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

// List returns up to limit (at most MaxPageLength) of provider's entries
// of status, from offset from of their stream, or its start if from is
// "": the records after the cursor for StatusPending, up to it for
// StatusDone, and the dead letters for StatusDead.
func (a *Admin) List(ctx context.Context, provider string, status Status, from string, limit int) (*Page, error) {
	prov := a.p.providers[provider]
	if prov == nil {
		return nil, fmt.Errorf("%w: provider %q", ErrNotFound, provider)
	}
	limit = min(max(limit, 1), MaxPageLength)
	if from == "" {
		from = webhooks.OffsetNone
	}
	if err := a.checkOffset(from); err != nil {
		return nil, err
	}
	stream, until := prov.stream, ""
	switch status {
	case StatusDead:
		stream = prov.dead
	case StatusPending, StatusDone:
		cur, err := a.cursor(ctx, prov.stream)
		if err != nil {
			return nil, err
		}
		if status == StatusDone {
			until = cur
		} else if from < cur { // "-1" sorts before every offset
			from = cur
		}
	default:
		return nil, fmt.Errorf("inbox: no status %q: want pending, done or dead", status)
	}
	page := &Page{Entries: []Entry{}}
	for len(page.Entries) < limit {
		if until != "" && from >= until { // done: up to the cursor
			return page, nil
		}
		b, err := a.reader.ReadEvents(ctx, stream, from, webhooks.ReadLimit{MaxEvents: 1})
		if errors.Is(err, webhooks.ErrStreamNotFound) {
			return page, nil
		}
		if err != nil {
			return nil, err
		}
		if len(b.Events) == 0 {
			return page, nil
		}
		e := Entry{Stream: stream, Offset: from, Status: status}
		var d DeadLetter
		if json.Unmarshal(b.Events[0], &d) == nil && (status == StatusDead || d.Provider == prov.name) {
			e.Record = &d
		} else {
			e.Raw = append(json.RawMessage(nil), b.Events[0]...)
		}
		if status == StatusDead && d.Provider != prov.name && e.Record != nil {
			e.Record = nil // a shared dead-letter stream's other provider's
		}
		if e.Record != nil || e.Raw != nil {
			page.Entries = append(page.Entries, e)
		}
		from = b.Next
		if b.UpToDate {
			return page, nil
		}
	}
	page.Next = from
	return page, nil
}

// Replay replays provider's latest dead letter of the delivery deliveryID,
// as read from its dead-letter stream (Processor.Replay); ErrNotFound if
// there is none.
func (a *Admin) Replay(ctx context.Context, provider, deliveryID string) error {
	prov := a.p.providers[provider]
	if prov == nil || deliveryID == "" {
		return ErrNotFound
	}
	var found []byte
	from := webhooks.OffsetNone
	for {
		b, err := a.reader.ReadEvents(ctx, prov.dead, from, webhooks.ReadLimit{MaxEvents: 1000})
		if errors.Is(err, webhooks.ErrStreamNotFound) {
			break
		}
		if err != nil {
			return err
		}
		for _, ev := range b.Events {
			var d DeadLetter
			if json.Unmarshal(ev, &d) == nil && d.Provider == provider && d.DeliveryID == deliveryID && d.Raw == nil {
				found = ev
			}
		}
		if b.UpToDate || len(b.Events) == 0 {
			break
		}
		from = b.Next
	}
	if found == nil {
		return ErrNotFound
	}
	return a.p.Replay(ctx, found)
}

// ReplayAt replays the dead letter of provider at offset of its dead-letter
// stream, for one whose record has no delivery id; ErrNotFound if there is
// none there.
func (a *Admin) ReplayAt(ctx context.Context, provider, offset string) error {
	prov := a.p.providers[provider]
	if prov == nil || offset == "" {
		return ErrNotFound
	}
	if err := a.checkOffset(offset); err != nil {
		return err
	}
	b, err := a.reader.ReadEvents(ctx, prov.dead, offset, webhooks.ReadLimit{MaxEvents: 1})
	if errors.Is(err, webhooks.ErrStreamNotFound) || err == nil && len(b.Events) == 0 {
		return ErrNotFound
	}
	if err != nil {
		// A reader tells no offset it never gave from a failure: the
		// operator's offset is taken for the cause.
		return fmt.Errorf("%w: %q: %v", ErrBadOffset, offset, err)
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
//   - POST ?replay={delivery_id}, or ?offset={offset} of the dead-letter
//     stream: 200 {"ok":true} once the dead letter's record is appended
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
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "from is not an offset of the stream")
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
	id, offset := "", ""
	if v := q["replay"]; len(v) > 0 {
		id = v[0]
	}
	if v := q["offset"]; len(v) > 0 {
		offset = v[0]
	}
	var err error
	switch {
	case id != "" && offset == "":
		err = a.Replay(r.Context(), provider, id)
	case id == "" && offset != "":
		err = a.ReplayAt(r.Context(), provider, offset)
	default:
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "name the dead letter: ?replay={delivery_id} or ?offset={offset}")
		return
	}
	switch {
	case errors.Is(err, ErrNotFound):
		writeError(w, http.StatusNotFound, codeDeadLetterNotFound, "no such dead letter")
		return
	case errors.Is(err, ErrBadOffset):
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "offset is not an offset of the dead-letter stream")
		return
	case errors.Is(err, errNotARecord):
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "the dead letter holds an event that was never a record")
		return
	case err != nil:
		a.p.log.ErrorContext(r.Context(), "inbox: replaying a dead letter failed", "provider", provider, "delivery_id", id, "offset", offset, "error", err)
		w.Header().Set("Retry-After", retryAfter)
		writeError(w, http.StatusServiceUnavailable, codeServiceUnavailable, "the record could not be stored again; retry later")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"ok":true}`+"\n")
}

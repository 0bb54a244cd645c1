package ui

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/inbox"
)

// Inbox is an inbox that the host mounts (package inbox), as the screen
// shows it: each provider's records and dead letters, read from their
// streams, and the replay of a dead letter through the Processor.
type Inbox struct {
	// Providers are the inbox's providers, as given to inbox.New.
	Providers []inbox.Provider
	// Streams reads the providers' record and dead-letter streams.
	Streams webhooks.EventReader
	// Processor replays dead letters (inbox.Processor.Replay).
	Processor *inbox.Processor
}

// inboxPageLength is how many records or dead letters a page shows.
const inboxPageLength = 50

// streamOf is provider p's records stream, or with dead its dead-letter
// stream, as package inbox defaults them.
func streamOf(p inbox.Provider, dead bool) string {
	switch {
	case dead && p.DeadStream != "":
		return p.DeadStream
	case dead:
		return "/inbox/" + p.Name + "/dead"
	case p.Stream != "":
		return p.Stream
	}
	return "/inbox/" + p.Name + "/records"
}

// provider returns the provider named name.
func (in *Inbox) provider(name string) (inbox.Provider, bool) {
	for _, p := range in.Providers {
		if p.Name == name {
			return p, true
		}
	}
	return inbox.Provider{}, false
}

// The inbox is no subscription: reading it is authorized as a listing,
// and replaying as an operation on no subscription.

func (h *Handler) inboxRead(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.inbox == nil {
			http.NotFound(w, r)
			return
		}
		if h.operator(w, r) && h.allowed(w, r, webhooks.OpList, "") {
			next.ServeHTTP(w, r)
		}
	})
}

func (h *Handler) inboxOperate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.inbox == nil {
			http.NotFound(w, r)
			return
		}
		if h.operator(w, r) && h.allowed(w, r, webhooks.OpOperate, "") {
			next.ServeHTTP(w, r)
		}
	})
}

// operator admits a request that acts within no tenant: the inbox is the
// host's, not a tenant's.
func (h *Handler) operator(w http.ResponseWriter, r *http.Request) bool {
	if _, ok := webhooks.TenantFromContext(r.Context()); ok {
		h.fail(w, r, http.StatusForbidden, "The inbox is the operator's.")
		return false
	}
	return true
}

// inboxData is the inbox page of one provider's records or dead letters.
type inboxData struct {
	Providers []string
	Provider  string
	Dead      bool
	From      string
	Entries   []inboxEntry
	Next      string
}

// inboxEntry is a record or a dead letter.
type inboxEntry struct {
	Index                                   int
	DeliveryID, EventType, ReceivedAt, Body string
	Bytes                                   int
	Reason, DeadAt                          string
	Errors                                  int
}

// bodyExcerpt is how much of a record's body a page shows.
const bodyExcerpt = 160

func (h *Handler) inboxPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := inboxData{Provider: q.Get("provider"), Dead: q.Get("kind") == "dead", From: q.Get("from")}
	for _, p := range h.inbox.Providers {
		d.Providers = append(d.Providers, p.Name)
	}
	if d.Provider == "" {
		d.Provider = d.Providers[0]
	}
	p, ok := h.inbox.provider(d.Provider)
	if !ok {
		h.fail(w, r, http.StatusNotFound, "There is no such provider.")
		return
	}
	from := d.From
	if from == "" {
		from = webhooks.OffsetNone
	}
	batch, err := h.inbox.Streams.ReadEvents(r.Context(), streamOf(p, d.Dead), from, webhooks.ReadLimit{MaxEvents: inboxPageLength})
	if err != nil {
		h.failed(w, r, err)
		return
	}
	for i, ev := range batch.Events {
		var dl inbox.DeadLetter
		e := inboxEntry{Index: i, Bytes: len(ev)}
		if json.Unmarshal(ev, &dl) == nil {
			e.DeliveryID, e.EventType, e.ReceivedAt = dl.DeliveryID, inbox.EventType(&dl.Record), when(dl.ReceivedAt)
			e.Bytes, e.Body = len(dl.Body), excerpt(dl.Body)
			e.Reason, e.Errors = dl.Reason, len(dl.Errors)
			if d.Dead {
				e.DeadAt = when(dl.DeadAt)
			}
		}
		d.Entries = append(d.Entries, e)
	}
	if !batch.UpToDate && len(batch.Events) > 0 {
		d.Next = batch.Next
	}
	h.render(w, r, http.StatusOK, "inbox", "Inbox", d)
}

// excerpt is the start of a body, as text.
func excerpt(b []byte) string {
	if len(b) > bodyExcerpt {
		return string(b[:bodyExcerpt]) + "…"
	}
	return string(b)
}

// replay replays a dead letter, named by the page it was on (provider,
// from) and its place there (index): it is read again from its stream,
// so that only what the stream holds is replayed.
func (h *Handler) replay(w http.ResponseWriter, r *http.Request) {
	name, from := r.PostFormValue("provider"), r.PostFormValue("from")
	i, err := strconv.Atoi(r.PostFormValue("index"))
	p, ok := h.inbox.provider(name)
	if !ok || err != nil || i < 0 || i >= inboxPageLength {
		h.fail(w, r, http.StatusBadRequest, "There is no such dead letter.")
		return
	}
	start := from
	if start == "" {
		start = webhooks.OffsetNone
	}
	batch, err := h.inbox.Streams.ReadEvents(r.Context(), streamOf(p, true), start, webhooks.ReadLimit{MaxEvents: i + 1})
	if err != nil {
		h.failed(w, r, err)
		return
	}
	if i >= len(batch.Events) {
		h.fail(w, r, http.StatusBadRequest, "There is no such dead letter.")
		return
	}
	if err := h.inbox.Processor.Replay(r.Context(), batch.Events[i]); err != nil {
		h.failed(w, r, err)
		return
	}
	q := url.Values{"provider": {name}, "kind": {"dead"}, "done": {"replay"}}
	if from != "" {
		q.Set("from", from)
	}
	http.Redirect(w, r, h.prefix+"/inbox?"+q.Encode(), http.StatusSeeOther)
}

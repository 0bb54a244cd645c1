package ui

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	webhooks "github.com/streamhooks/webhooks"
)

// The actions are POSTs of forms from the screen. Each is authorized as
// the subscription API authorizes the request that does the same:
// pausing and resuming as an update (PATCH status), the others as an
// operation (POST &rewind, &revive, &test, &rotate, &verify, &challenge).

// actionOn reads the subscription id of an action's form and authorizes
// op on it.
func (h *Handler) actionOn(w http.ResponseWriter, r *http.Request, op webhooks.Operation) (string, bool) {
	id := r.PostFormValue("id")
	return id, h.allowed(w, r, op, id)
}

// back redirects to subscription id's page, saying what was done.
func (h *Handler) back(w http.ResponseWriter, r *http.Request, path, id, done string) {
	http.Redirect(w, r, h.prefix+path+"?"+url.Values{"id": {id}, "done": {done}}.Encode(), http.StatusSeeOther)
}

func (h *Handler) pause(w http.ResponseWriter, r *http.Request) {
	id, ok := h.actionOn(w, r, webhooks.OpUpdate)
	if !ok {
		return
	}
	if _, err := h.engine.PauseSubscription(r.Context(), id); err != nil {
		h.failed(w, r, err)
		return
	}
	h.back(w, r, "/subscription", id, "paused")
}

func (h *Handler) resume(w http.ResponseWriter, r *http.Request) {
	id, ok := h.actionOn(w, r, webhooks.OpUpdate)
	if !ok {
		return
	}
	if _, err := h.engine.ResumeSubscription(r.Context(), id); err != nil {
		h.failed(w, r, err)
		return
	}
	h.back(w, r, "/subscription", id, "resumed")
}

// verify activates a pending subscription by hand, as an operator who
// knows its endpoint does.
func (h *Handler) verify(w http.ResponseWriter, r *http.Request) {
	id, ok := h.actionOn(w, r, webhooks.OpOperate)
	if !ok {
		return
	}
	if _, err := h.engine.VerifySubscription(r.Context(), id); err != nil {
		h.failed(w, r, err)
		return
	}
	h.back(w, r, "/subscription", id, "verified")
}

// challenge restarts a pending subscription's verification: a challenge
// goes to its endpoint at once.
func (h *Handler) challenge(w http.ResponseWriter, r *http.Request) {
	id, ok := h.actionOn(w, r, webhooks.OpOperate)
	if !ok {
		return
	}
	if _, err := h.engine.RestartVerification(r.Context(), id); err != nil {
		h.failed(w, r, err)
		return
	}
	h.back(w, r, "/subscription", id, "challenged")
}

// testData is the outcome of a test delivery.
type testData struct {
	Sub    string
	Result *webhooks.TestDelivery
}

func (h *Handler) test(w http.ResponseWriter, r *http.Request) {
	id, ok := h.actionOn(w, r, webhooks.OpOperate)
	if !ok {
		return
	}
	res, err := h.engine.SendTestDelivery(r.Context(), id)
	if err != nil {
		h.failed(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "test", "Test delivery", testData{id, res})
}

// rotatedData shows a new secret, once: the page is the answer to the
// POST and is not stored by the browser.
type rotatedData struct {
	Sub, Secret string
	Overlap     time.Duration
}

func (h *Handler) rotate(w http.ResponseWriter, r *http.Request) {
	id, ok := h.actionOn(w, r, webhooks.OpOperate)
	if !ok {
		return
	}
	overlap := webhooks.DefaultRotationOverlap
	if s := strings.TrimSpace(r.PostFormValue("overlap_hours")); s != "" {
		hours, err := strconv.ParseFloat(s, 64)
		if err != nil || hours < 0 || time.Duration(hours*float64(time.Hour)) > webhooks.MaxRotationOverlap {
			h.fail(w, r, http.StatusBadRequest, "The overlap is a number of hours, from 0 to 720.")
			return
		}
		overlap = time.Duration(hours * float64(time.Hour))
	}
	secret, err := h.engine.RotateSecret(r.Context(), id, overlap)
	if err != nil {
		h.failed(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "rotated", "New secret", rotatedData{id, secret, overlap})
}

// rewindData is the outcome of a rewind.
type rewindData struct {
	Sub, Consumer string
	Rewound       int
	Failed        bool
}

// rewind sets the cursors of a subscription, or of one of its consumers,
// to an offset or to a time given as RFC 3339 or as a browser's
// datetime-local value, taken as UTC.
func (h *Handler) rewind(w http.ResponseWriter, r *http.Request) {
	id, ok := h.actionOn(w, r, webhooks.OpOperate)
	if !ok {
		return
	}
	p := &webhooks.RewindParams{SubscriptionID: id, Consumer: r.PostFormValue("consumer"),
		Offset: strings.TrimSpace(r.PostFormValue("offset"))}
	if at := strings.TrimSpace(r.PostFormValue("at")); at != "" {
		t, err := parseTime(at)
		if err != nil || p.Offset != "" {
			h.fail(w, r, http.StatusBadRequest, "Give an offset or a time (such as 2026-01-02T15:04:05Z), not both.")
			return
		}
		p.At = t
	} else if p.Offset == "" {
		h.fail(w, r, http.StatusBadRequest, "Give an offset (-1 for the start) or a time.")
		return
	}
	if p.Consumer != "" {
		if sub, _, err := webhooks.ParseConsumerID(p.Consumer); err != nil || sub != id {
			h.fail(w, r, http.StatusNotFound, "There is no such consumer.")
			return
		}
	}
	n, err := h.engine.Rewind(r.Context(), p)
	var invalid *webhooks.ValidationError
	if n == 0 && (errors.As(err, &invalid) || errors.Is(err, webhooks.ErrSubscriptionNotFound)) {
		h.failed(w, r, err) // the operator's input, or no such subscription: say why
		return
	}
	if err != nil {
		h.log.WarnContext(r.Context(), "ui: rewind", "subscription", id, "consumer", p.Consumer, "error", err)
	}
	h.render(w, r, http.StatusOK, "rewound", "Rewind", rewindData{id, p.Consumer, n, err != nil})
}

func parseTime(s string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Parse(time.RFC3339Nano, s)
}

// revive revives a dead consumer and returns to the page the form was on:
// the consumer's, or the dead letters'.
func (h *Handler) revive(w http.ResponseWriter, r *http.Request) {
	cid := r.PostFormValue("consumer")
	sub, _, err := webhooks.ParseConsumerID(cid)
	if err != nil {
		h.fail(w, r, http.StatusNotFound, "There is no such consumer.")
		return
	}
	if !h.allowed(w, r, webhooks.OpOperate, sub) {
		return
	}
	c, err := h.engine.Consumer(r.Context(), cid)
	if err != nil {
		h.failed(w, r, err)
		return
	}
	if c.State != webhooks.StateFailed {
		h.fail(w, r, http.StatusConflict, "This consumer is not a dead letter.")
		return
	}
	if err := h.engine.ResumeConsumer(r.Context(), cid); err != nil {
		h.failed(w, r, err)
		return
	}
	if r.PostFormValue("from") == "dead" {
		http.Redirect(w, r, h.prefix+"/dead?done=revived", http.StatusSeeOther)
		return
	}
	h.back(w, r, "/consumer", cid, "revived")
}

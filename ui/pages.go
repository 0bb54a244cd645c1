package ui

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	webhooks "github.com/streamhooks/webhooks"
)

// subscriptionsPerPage is how many subscriptions the list shows at once;
// each costs four bounded count reads.
const subscriptionsPerPage = 50

// deliveryLogLength is how many of a consumer's latest attempts its page
// shows.
const deliveryLogLength = 50

// page is what every template gets.
type page struct {
	Prefix string
	Title  string
	Inbox  bool
	// Live is the URL the page's script polls, if any.
	Live string
	// Done says what the action that led here did.
	Done string
	Data any
}

// render writes template name with data.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name, title string, data any) {
	h.renderPage(w, r, status, name, page{Title: title, Data: data})
}

func (h *Handler) renderPage(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	p.Prefix, p.Inbox = h.prefix, h.inbox != nil
	if p.Done == "" {
		p.Done = doneMessages[r.URL.Query().Get("done")]
	}
	var buf bytes.Buffer
	if err := h.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		h.log.ErrorContext(r.Context(), "ui: rendering", "page", name, "error", err)
		http.Error(w, "Something failed; it is logged.", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail answers with an error page saying msg, which must be the screen's
// own words, never an error's text.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.render(w, r, status, "error", http.StatusText(status), msg)
}

// failed logs err and answers: 404 for a subscription or consumer that is
// not there, a generic 500 otherwise.
func (h *Handler) failed(w http.ResponseWriter, r *http.Request, err error) {
	var invalid *webhooks.ValidationError
	switch {
	case errors.Is(err, webhooks.ErrSubscriptionNotFound):
		h.fail(w, r, http.StatusNotFound, "There is no such subscription.")
	case errors.Is(err, webhooks.ErrConsumerNotFound):
		h.fail(w, r, http.StatusNotFound, "There is no such consumer.")
	case errors.Is(err, webhooks.ErrPendingVerification):
		h.fail(w, r, http.StatusConflict, "The subscription is pending verification: verify it first.")
	case errors.Is(err, webhooks.ErrNotPending):
		h.fail(w, r, http.StatusConflict, "The subscription is not pending verification.")
	case errors.Is(err, webhooks.ErrNotStarted):
		w.Header().Set("Retry-After", "1")
		h.fail(w, r, http.StatusServiceUnavailable, "The engine is starting; retry shortly.")
	case errors.Is(err, webhooks.ErrStoreUnavailable):
		w.Header().Set("Retry-After", "1")
		h.fail(w, r, http.StatusServiceUnavailable, "The engine cannot reach its store; retry shortly.")
	case errors.As(err, &invalid):
		// The reason is written for the operator: it names the field.
		h.fail(w, r, http.StatusBadRequest, invalid.Reason)
	default:
		h.log.ErrorContext(r.Context(), "ui: request failed", "path", r.URL.Path, "error", err)
		h.fail(w, r, http.StatusInternalServerError, "Something failed; it is logged.")
	}
}

// doneMessages are what an action that redirects says it did.
var doneMessages = map[string]string{
	"paused":     "Paused: no delivery starts until it is resumed.",
	"resumed":    "Resumed from its cursors.",
	"revived":    "Revived: it delivers again from its cursor.",
	"rewound":    "Rewound.",
	"verified":   "Verified: it delivers from its cursors.",
	"challenged": "A new challenge is sent to its endpoint, and retried for 24 hours.",
	"replay":     "Replayed: the record is appended to the inbox again.",
}

// subscriptionsData is the subscriptions page.
type subscriptionsData struct {
	Query     string
	Subs      []subscriptionView
	Total     int
	Page      int
	PrevPage  string
	NextPage  string
	States    []webhooks.ConsumerState
	Truncated bool
}

func (h *Handler) subscriptionsPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	subs, err := h.engine.Subscriptions(ctx)
	if err != nil {
		h.failed(w, r, err)
		return
	}
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	var found []*webhooks.Subscription
	for _, s := range subs {
		if matches(s, q) {
			found = append(found, s)
		}
	}
	n, _ := strconv.Atoi(r.URL.Query().Get("page"))
	n = max(0, min(n, (len(found)-1)/subscriptionsPerPage))
	d := subscriptionsData{Query: q, Total: len(found), Page: n + 1, States: states}
	if n > 0 {
		d.PrevPage = strconv.Itoa(n - 1)
	}
	if (n+1)*subscriptionsPerPage < len(found) {
		d.NextPage = strconv.Itoa(n + 1)
	}
	for _, s := range found[min(n*subscriptionsPerPage, len(found)):min((n+1)*subscriptionsPerPage, len(found))] {
		v := viewSubscription(s, false)
		if v.Counts, err = h.counts(ctx, s.ID); err != nil {
			h.failed(w, r, err)
			return
		}
		d.Subs = append(d.Subs, v)
	}
	h.render(w, r, http.StatusOK, "subscriptions", "Subscriptions", d)
}

// matches reports whether the search q finds s: a substring of its ID,
// pattern, webhook, handler, description, mode or status.
func matches(s *webhooks.Subscription, q string) bool {
	if q == "" {
		return true
	}
	q = strings.ToLower(q)
	for _, f := range []string{s.ID, s.Pattern, target(s), s.Description, string(mode(s)), status(s)} {
		if strings.Contains(strings.ToLower(f), q) {
			return true
		}
	}
	return false
}

// subscriptionData is one subscription's page.
type subscriptionData struct {
	Sub       subscriptionView
	State     string
	After     string
	Consumers []consumerRow
	Next      string
	States    []webhooks.ConsumerState
}

// subscriptionQuery reads the subscription, state filter and page of a
// subscription's page or its live read, after authorizing a read.
func (h *Handler) subscriptionQuery(w http.ResponseWriter, r *http.Request) (sub *webhooks.Subscription, state webhooks.ConsumerState, after string, ok bool) {
	q := r.URL.Query()
	id := q.Get("id")
	if !h.allowed(w, r, webhooks.OpRead, id) {
		return nil, "", "", false
	}
	state, ok = parseState(q.Get("state"))
	if !ok {
		h.fail(w, r, http.StatusBadRequest, "Unknown state: use IDLE, WAKING, LIVE or FAILED.")
		return nil, "", "", false
	}
	sub, err := h.engine.Subscription(r.Context(), id)
	if err != nil {
		h.failed(w, r, err)
		return nil, "", "", false
	}
	return sub, state, q.Get("after"), true
}

func (h *Handler) subscriptionData(r *http.Request, sub *webhooks.Subscription, state webhooks.ConsumerState, after string) (*subscriptionData, error) {
	d := &subscriptionData{Sub: viewSubscription(sub, true), State: string(state), After: after, States: states}
	var err error
	if d.Sub.Counts, err = h.counts(r.Context(), sub.ID); err != nil {
		return nil, err
	}
	if d.Consumers, d.Next, err = h.consumerPageOf(r.Context(), sub.ID, state, after); err != nil {
		return nil, err
	}
	return d, nil
}

func (h *Handler) subscriptionPage(w http.ResponseWriter, r *http.Request) {
	sub, state, after, ok := h.subscriptionQuery(w, r)
	if !ok {
		return
	}
	d, err := h.subscriptionData(r, sub, state, after)
	if err != nil {
		h.failed(w, r, err)
		return
	}
	h.renderPage(w, r, http.StatusOK, "subscription", page{Title: "Subscription " + sub.ID, Data: d,
		Live: h.prefix + "/subscription/live?" + r.URL.RawQuery})
}

// subscriptionLive answers the subscription page's script with the texts
// that change: status, health, counts and the listed consumers' states.
// It costs the Store six reads: the subscription, four counts and a page.
func (h *Handler) subscriptionLive(w http.ResponseWriter, r *http.Request) {
	sub, state, after, ok := h.subscriptionQuery(w, r)
	if !ok {
		return
	}
	d, err := h.subscriptionData(r, sub, state, after)
	if err != nil {
		h.failed(w, r, err)
		return
	}
	live := map[string]string{"status": d.Sub.Status}
	addHealth(live, d.Sub.Health)
	for _, c := range d.Sub.Counts {
		live["count/"+string(c.State)] = c.Count.String()
	}
	for _, c := range d.Consumers {
		addConsumer(live, c)
	}
	writeLive(w, live)
}

func addHealth(live map[string]string, hv healthView) {
	live["health"] = hv.State
	live["health/failures"] = strconv.Itoa(hv.Failures)
	live["health/failing_since"] = hv.FailingSince
	live["health/last_success"] = hv.LastSuccess
	live["health/last_failure"] = hv.LastFailure
	live["health/last_error"] = hv.LastError
}

func addConsumer(live map[string]string, c consumerRow) {
	p := "consumer/" + c.ID + "/"
	live[p+"state"] = c.State
	live[p+"epoch"] = strconv.FormatInt(c.Epoch, 10)
	live[p+"failures"] = strconv.Itoa(c.Failures)
	live[p+"deadline"] = c.Deadline
	live[p+"last_error"] = c.LastError
}

// writeLive answers a live read: a JSON object of element keys and texts.
func writeLive(w http.ResponseWriter, live map[string]string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(live)
}

// consumerData is one consumer's page.
type consumerData struct {
	Sub      subscriptionView
	C        consumerRow
	Consumer *webhooks.Consumer
	Streams  []webhooks.StreamOffset
	Log      []attemptRow
	Dead     bool
}

// attemptRow is one delivery attempt.
type attemptRow struct {
	At, DeliveryID, ErrorClass, Error, Duration, Response string
	Attempt, StatusCode                                   int
}

// consumerQuery reads the consumer of a consumer page or live read, and
// its subscription, after authorizing a read of the subscription.
func (h *Handler) consumerQuery(w http.ResponseWriter, r *http.Request) (*webhooks.Subscription, *webhooks.Consumer, bool) {
	id := r.URL.Query().Get("id")
	subID, _, err := webhooks.ParseConsumerID(id)
	if err != nil {
		h.fail(w, r, http.StatusNotFound, "There is no such consumer.")
		return nil, nil, false
	}
	if !h.allowed(w, r, webhooks.OpRead, subID) {
		return nil, nil, false
	}
	sub, err := h.engine.Subscription(r.Context(), subID)
	if err != nil {
		h.failed(w, r, err)
		return nil, nil, false
	}
	c, err := h.engine.Consumer(r.Context(), id)
	if err != nil {
		h.failed(w, r, err)
		return nil, nil, false
	}
	return sub, c, true
}

func (h *Handler) consumerPage(w http.ResponseWriter, r *http.Request) {
	sub, c, ok := h.consumerQuery(w, r)
	if !ok {
		return
	}
	attempts, err := h.engine.DeliveryLog(r.Context(), c.ID, deliveryLogLength)
	if err != nil {
		h.failed(w, r, err)
		return
	}
	d := consumerData{Sub: viewSubscription(sub, false), C: viewConsumerRow(c), Consumer: c, Streams: c.Streams,
		Dead: c.State == webhooks.StateFailed}
	for _, a := range attempts {
		d.Log = append(d.Log, attemptRow{At: when(a.At), DeliveryID: a.DeliveryID, ErrorClass: a.ErrorClass, Error: a.Error,
			Duration: a.Latency.Round(100_000).String(), Response: a.ResponseBody, Attempt: a.Attempt, StatusCode: a.StatusCode})
	}
	h.renderPage(w, r, http.StatusOK, "consumer", page{Title: "Consumer " + c.ID, Data: d,
		Live: h.prefix + "/consumer/live?" + r.URL.RawQuery})
}

// consumerLive answers the consumer page's script: two Store reads.
func (h *Handler) consumerLive(w http.ResponseWriter, r *http.Request) {
	sub, c, ok := h.consumerQuery(w, r)
	if !ok {
		return
	}
	live := map[string]string{"status": status(sub)}
	addHealth(live, viewHealth(sub.Health))
	addConsumer(live, viewConsumerRow(c))
	for _, s := range c.Streams {
		live["stream/"+s.Path] = s.Offset
	}
	writeLive(w, live)
}

// deadData is the dead letters' page.
type deadData struct {
	Rows    []deadRow
	NextSub string
	Next    string
}

// deadRow is a dead letter and its subscription.
type deadRow struct {
	Sub string
	consumerRow
}

// deadPage lists dead letters across subscriptions, ordered by
// subscription and consumer, a page at a time: from subscription ?sub
// after its consumer ?after.
func (h *Handler) deadPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	subs, err := h.engine.Subscriptions(ctx)
	if err != nil {
		h.failed(w, r, err)
		return
	}
	fromSub, after := r.URL.Query().Get("sub"), r.URL.Query().Get("after")
	var d deadData
	for _, s := range subs {
		if s.ID < fromSub || h.engine.Authorize(r, webhooks.OpRead, s.ID) != nil {
			continue
		}
		if s.ID != fromSub {
			after = ""
		}
		left := consumerPage - len(d.Rows)
		cs, err := h.engine.ListConsumers(ctx, &webhooks.ListConsumersParams{SubscriptionID: s.ID, State: webhooks.StateFailed, After: after, Limit: left})
		if err != nil {
			h.failed(w, r, err)
			return
		}
		for _, c := range cs {
			d.Rows = append(d.Rows, deadRow{s.ID, viewConsumerRow(c)})
		}
		if len(cs) == left {
			d.NextSub, d.Next = s.ID, cs[len(cs)-1].ID
			break
		}
	}
	h.render(w, r, http.StatusOK, "dead", "Dead letters", d)
}

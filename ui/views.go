package ui

import (
	"context"
	"fmt"
	"html/template"
	"net/url"
	"slices"
	"strings"
	"time"

	webhooks "github.com/streamhooks/webhooks"
)

// countCap bounds how many consumers of one state a count reads: beyond
// it the screen says "1000+", so that a count costs the Store a bounded
// read however many consumers a subscription has.
const countCap = 1000

// consumerPage is how many consumers a page lists.
const consumerPage = 50

// states are the consumer states, in the order the screen shows them.
var states = []webhooks.ConsumerState{webhooks.StateIdle, webhooks.StateWaking, webhooks.StateLive, webhooks.StateFailed}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"when": when,
	"query": func(kv ...string) template.URL {
		q := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] != "" {
				q.Set(kv[i], kv[i+1])
			}
		}
		return template.URL(q.Encode())
	},
}

// when shows t in UTC to the second, or "—" for the zero time.
func when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// count is how many consumers are in one state, up to countCap.
type count struct {
	N    int
	More bool
}

func (c count) String() string {
	if c.More {
		return fmt.Sprintf("%d+", c.N)
	}
	return fmt.Sprint(c.N)
}

// healthView is a subscription's health as the screen shows it.
type healthView struct {
	State        string // "healthy" or "unhealthy"
	Failures     int
	FailingSince string
	LastSuccess  string
	LastFailure  string
	LastError    string
}

// option is one line of a subscription's options.
type option struct{ Name, Value string }

// subscriptionView is a subscription as the screen shows it: never its
// secrets or its custom header values.
type subscriptionView struct {
	ID, Pattern, Mode, Status, Target, Description string
	Health                                         healthView
	Counts                                         []stateCount
	Options                                        []option
}

// stateCount is the count of one state.
type stateCount struct {
	State webhooks.ConsumerState
	Count count
}

func viewHealth(h webhooks.SubscriptionHealth) healthView {
	v := healthView{State: "healthy", Failures: h.ConsecutiveFailures, FailingSince: when(h.FailingSince),
		LastSuccess: when(h.LastSuccessAt), LastFailure: when(h.LastFailureAt), LastError: h.LastFailureReason}
	if h.ConsecutiveFailures > 0 {
		v.State = "unhealthy"
	}
	return v
}

// viewSubscription shows s; options only if withOptions.
func viewSubscription(s *webhooks.Subscription, withOptions bool) subscriptionView {
	v := subscriptionView{ID: s.ID, Pattern: s.Pattern, Mode: string(mode(s)), Status: status(s),
		Target: target(s), Description: s.Description, Health: viewHealth(s.Health)}
	if withOptions {
		v.Options = options(s)
	}
	return v
}

func mode(s *webhooks.Subscription) webhooks.DeliveryMode {
	if s.Delivery == "" {
		return webhooks.DeliveryWake
	}
	return s.Delivery
}

func status(s *webhooks.Subscription) string {
	if s.Status == "" {
		return string(webhooks.StatusActive)
	}
	return string(s.Status)
}

// target is where s delivers: its webhook, without a password the URL may
// carry, or its handler.
func target(s *webhooks.Subscription) string {
	if s.Delivery == webhooks.DeliveryHandler {
		return "handler " + s.Handler
	}
	if u, err := url.Parse(s.Webhook); err == nil {
		return u.Redacted()
	}
	return s.Webhook
}

// options lists what configures s, with header names but never their
// values, and the end of a rotation's overlap but never a secret.
func options(s *webhooks.Subscription) []option {
	sig := string(s.Signature)
	if sig == "" {
		sig = string(webhooks.SignatureStreamhooks)
	}
	out := []option{{"created", when(s.CreatedAt)}, {"signature", sig}}
	if !s.PreviousSecretExpiresAt.IsZero() {
		out = append(out, option{"previous secret signs until", when(s.PreviousSecretExpiresAt)})
	}
	if s.RateLimit > 0 {
		out = append(out, option{"rate limit", fmt.Sprintf("%d a minute", s.RateLimit)})
	}
	if r := s.Retry; r != nil {
		if len(r.Schedule) > 0 {
			out = append(out, option{"retry schedule", fmt.Sprint(r.Schedule)})
		}
		if r.MaxAttempts > 0 {
			out = append(out, option{"max attempts", fmt.Sprint(r.MaxAttempts)})
		}
		if r.MaxAge > 0 {
			out = append(out, option{"max age", r.MaxAge.String()})
		}
	}
	if ev := s.Events; ev != nil {
		out = append(out, option{"batch", fmt.Sprintf("up to %d events, %d bytes, waiting %v", ev.MaxBatchEvents, ev.MaxBatchBytes, ev.MaxWait)})
		if ev.Timeout > 0 {
			out = append(out, option{"timeout", ev.Timeout.String()})
		}
		if len(ev.Headers) > 0 {
			names := make([]string, 0, len(ev.Headers))
			for name := range ev.Headers {
				names = append(names, name)
			}
			slices.Sort(names)
			out = append(out, option{"headers (values hidden)", strings.Join(names, ", ")})
		}
		if f := ev.Filter; f != nil {
			out = append(out, option{"filter", f.Field + " matches " + strings.Join(f.Patterns, " or ")})
		}
	}
	return out
}

// counts reads how many consumers of s are in each state, up to countCap
// each: four bounded Store reads.
func (h *Handler) counts(ctx context.Context, id string) ([]stateCount, error) {
	out := make([]stateCount, len(states))
	for i, st := range states {
		cs, err := h.engine.ListConsumers(ctx, &webhooks.ListConsumersParams{SubscriptionID: id, State: st, Limit: countCap + 1})
		if err != nil {
			return nil, err
		}
		out[i] = stateCount{st, count{N: min(len(cs), countCap), More: len(cs) > countCap}}
	}
	return out, nil
}

// consumerRow is a consumer in a listing.
type consumerRow struct {
	ID, Stream, State, Deadline, LastError string
	Epoch                                  int64
	Failures                               int
}

func viewConsumerRow(c *webhooks.Consumer) consumerRow {
	return consumerRow{ID: c.ID, Stream: c.PrimaryStream, State: string(c.State), Deadline: when(c.Deadline),
		LastError: c.LastError, Epoch: c.Epoch, Failures: c.Failures}
}

// consumerPageOf reads a page of the consumers of subscription id in
// state (all if ""), after the consumer ID after: one Store read.
func (h *Handler) consumerPageOf(ctx context.Context, id string, state webhooks.ConsumerState, after string) (rows []consumerRow, next string, err error) {
	cs, err := h.engine.ListConsumers(ctx, &webhooks.ListConsumersParams{SubscriptionID: id, State: state, After: after, Limit: consumerPage})
	if err != nil {
		return nil, "", err
	}
	rows = make([]consumerRow, len(cs))
	for i, c := range cs {
		rows[i] = viewConsumerRow(c)
	}
	if len(cs) == consumerPage {
		next = cs[len(cs)-1].ID
	}
	return rows, next, nil
}

// parseState reads a state filter, "" for all.
func parseState(s string) (webhooks.ConsumerState, bool) {
	st := webhooks.ConsumerState(strings.ToUpper(s))
	return st, st == "" || slices.Contains(states, st)
}

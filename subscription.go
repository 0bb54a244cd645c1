package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// MaxSubscriptionIDLength bounds subscription IDs, and so consumer IDs.
const MaxSubscriptionIDLength = 128

// ValidateSubscriptionID reports whether id may name a subscription, with a
// *ValidationError if not: 1 to
// MaxSubscriptionIDLength characters from A-Z, a-z, 0-9, '-', '_' and '.'.
// ':' is excluded because it separates the parts of a consumer ID.
func ValidateSubscriptionID(id string) error {
	if id == "" {
		return invalid("subscription", "subscription id is empty")
	}
	if len(id) > MaxSubscriptionIDLength {
		return invalid("subscription", "subscription id is longer than %d characters", MaxSubscriptionIDLength)
	}
	for _, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return invalid("subscription", "subscription id %q may use only letters, digits, '-', '_' and '.'", id)
		}
	}
	return nil
}

// Limits on subscription API requests, so that none can grow memory or the
// Store without bound. Each limit is inclusive; a request past one is
// refused with 400 INVALID_REQUEST and a message naming the limit.
const (
	// MaxSubscriptionBodyBytes bounds a subscription API request body, in
	// bytes.
	MaxSubscriptionBodyBytes = 16 << 10
	// MaxDescriptionLength bounds a subscription's description, in bytes.
	MaxDescriptionLength = 1024
	// MaxNameLength bounds a subscription's name, in bytes.
	MaxNameLength = 256
	// MaxWebhookURLLength bounds a webhook URL, in bytes.
	MaxWebhookURLLength = 2048
)

// subscriptionJSON is a subscription as the API shows it. The secret is
// shown only in the response that creates the subscription, or rotates its
// secret; the previous secret never.
type subscriptionJSON struct {
	SubscriptionID string             `json:"subscription_id"`
	Pattern        string             `json:"pattern"`
	Webhook        string             `json:"webhook"`
	Handler        string             `json:"handler,omitempty"`
	Tenant         string             `json:"tenant,omitempty"`
	WebhookSecret  string             `json:"webhook_secret,omitempty"`
	Name           string             `json:"name,omitempty"`
	Description    string             `json:"description,omitempty"`
	Delivery       DeliveryMode       `json:"delivery"`
	Status         SubscriptionStatus `json:"status"`
	Verification   *verificationJSON  `json:"verification,omitempty"`
	CreatedAt      *time.Time         `json:"created_at,omitempty"`
	UpdatedAt      *time.Time         `json:"updated_at,omitempty"`
	optionsJSON
	pushJSON
	healthJSON
}

// view is s as the API shows it.
func (e *Engine) view(s *Subscription) subscriptionJSON {
	out := subscriptionJSON{
		SubscriptionID: s.ID, Pattern: s.Pattern, Webhook: s.Webhook, Handler: s.Handler, Tenant: s.Tenant, Description: s.Description,
		Delivery: s.Delivery.orDefault(), Status: s.status(),
		optionsJSON: optionsView(s, e.core.rules.retryPolicy(s)), healthJSON: healthView(s.Health),
		pushJSON: mechanismOf(s).options(s), Name: s.Name, Verification: verificationView(s.Verification),
	}
	// A subscription stored before UpdatedAt was kept shows CreatedAt.
	if created, updated := s.CreatedAt, s.UpdatedAt; !created.IsZero() {
		if updated.IsZero() {
			updated = created
		}
		created, updated = created.UTC(), updated.UTC()
		out.CreatedAt, out.UpdatedAt = &created, &updated
	}
	return out
}

// createRequest is the body of a create request.
type createRequest struct {
	Webhook     string `json:"webhook"`
	Name        string `json:"name"`
	Description string `json:"description"`
	// Secret, if set, is the client's own signing secret (ValidateSecret).
	Secret string `json:"secret"`
	// Verify creates the subscription pending until its endpoint is
	// verified.
	Verify   bool         `json:"verify"`
	Delivery DeliveryMode `json:"delivery"`
	// DeliverPolicy says where the consumers of existing streams start:
	// "new" (the default) at their tails, "all" before their first
	// events, "from_offset" at Offset.
	DeliverPolicy string `json:"deliver_policy"`
	Offset        string `json:"offset"`
	optionsJSON
	pushJSON
}

// SubscriptionHandler returns the handler of the subscription API. The
// request path is the glob pattern, and the query says what to do:
//
//	PUT    {pattern}?subscription={id}   create (201), or 200 if identical
//	GET    {pattern}?subscription={id}   get one
//	DELETE {pattern}?subscription={id}   delete (204) with its consumers
//	GET    {pattern}?subscriptions       list those whose pattern matches
//
// GET and DELETE find a subscription only if the request pattern matches
// its pattern, so "/**" reaches every subscription. The operator routes
// add one query parameter (see the README). Every request passes the
// Authorizer first, one whose method no route serves too; that one is then
// answered 405 with an Allow header.
func (e *Engine) SubscriptionHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := e.tel.tracer.Start(r.Context(), "webhooks.subscription."+strings.ToLower(r.Method))
		defer span.End()
		status, body, err := e.serveSubscription(ctx, r)
		if err != nil {
			span.SetAttributes(attribute.Int("http.response.status_code", httpError(err).status))
			span.SetStatus(codes.Error, err.Error())
			e.writeError(w, r, err)
			return
		}
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if body == nil {
			w.WriteHeader(status)
			return
		}
		writeJSON(w, status, body)
	})
}

// serveSubscription finds the route r asks for in the table, asks the
// Authorizer, and serves it: a method that no route serves at r's shape is
// answered 405 only once the Authorizer allowed the request, and without
// looking the subscription up.
func (e *Engine) serveSubscription(ctx context.Context, r *http.Request) (int, any, error) {
	q := r.URL.Query()
	s := shapeOf(q)
	name := operationName(s, q)
	if s == shapeSubscription && name != "" {
		trace.SpanFromContext(ctx).SetAttributes(attribute.String("webhooks.operation", name))
	}
	rt, allow := findRoute(s, name, r.Method)
	at := target{id: q.Get("subscription")}
	if err := e.authorize(r, s, rt, at.id); err != nil {
		return 0, nil, err
	}
	ctx, err := e.tenantContext(ctx, r)
	if err != nil {
		return 0, nil, err
	}
	if tenant, ok := TenantFromContext(ctx); ok {
		trace.SpanFromContext(ctx).SetAttributes(attribute.String("webhooks.tenant", tenant))
	}
	if err := e.checkLoaded(); err != nil {
		return 0, nil, err
	}
	pattern, err := ParsePattern(r.URL.Path)
	if err != nil {
		return 0, nil, asInvalid("pattern", err)
	}
	at.pattern = pattern
	if s == shapeSubscription {
		if err := ValidateSubscriptionID(at.id); err != nil {
			return 0, nil, err
		}
	}
	if rt == nil {
		return 0, nil, &methodError{allow: allow}
	}
	return rt.serve(e, ctx, r, at)
}

// getSubscription answers with the subscription as the API shows it.
func (e *Engine) getSubscription(ctx context.Context, _ *http.Request, at target) (int, any, error) {
	sub, err := e.findSubscription(ctx, at.pattern, at.id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, e.view(sub), nil
}

// patchRequest is the body of a PATCH: the fields to change, every one
// optional. Headers given replace them all; a filter given replaces it.
type patchRequest struct {
	Status      *SubscriptionStatus `json:"status"`
	Webhook     *string             `json:"webhook"`
	Name        *string             `json:"name"`
	Description *string             `json:"description"`
	optionsJSON
	pushJSON
}

// patchSubscription changes a subscription's status or mutable fields.
// A status change is applied after the fields, so that a PATCH that
// resumes a subscription and fixes its webhook delivers to the new one.
func (e *Engine) patchSubscription(ctx context.Context, r *http.Request, at target) (int, any, error) {
	pattern, id := at.pattern, at.id
	var req patchRequest
	if err := readRequest(r.Body, &req); err != nil {
		return 0, nil, err
	}
	// Pending is entered only at creation, and left only by verification.
	if req.Status != nil && *req.Status != StatusActive && *req.Status != StatusPaused {
		return 0, nil, invalid("status", "status must be %q or %q", StatusActive, StatusPaused)
	}
	sub, err := e.findSubscription(ctx, pattern, id)
	if err != nil {
		return 0, nil, err
	}
	// A tenant whose patterns the host has narrowed since may not change
	// a subscription outside them, not even resume it.
	if err := e.checkTenantPattern(sub); err != nil {
		return 0, nil, err
	}
	if req.Signature != "" && req.Signature != sub.signature() {
		return 0, nil, invalid("signature", "signature cannot be changed; delete and re-create the subscription")
	}
	if !req.pushJSON.empty() && !mechanismOf(sub).eventOptions() {
		return 0, nil, invalid(req.pushJSON.field(),
			"batch, headers, timeout_ms, filter and columns apply only to delivery %q", DeliveryEvents)
	}
	if req.Status != nil && sub.status() == StatusPending {
		return 0, nil, detail(ErrPendingVerification, "subscription %s is pending verification; verify it first", id)
	}
	if req.Webhook != nil || req.Name != nil || req.Description != nil || req.Retry != nil || req.MaxDeliveriesPerMinute != nil || !req.pushJSON.empty() {
		sub, err = e.UpdateSubscription(ctx, id, func(s *Subscription) error {
			if req.Webhook != nil {
				s.Webhook = *req.Webhook
			}
			if req.Name != nil {
				s.Name = *req.Name
			}
			if req.Description != nil {
				s.Description = *req.Description
			}
			if req.Retry != nil && s.Retry == nil {
				s.Retry = &RetryPolicy{MaxAge: e.cfg.failureGCAfter}
			}
			if err := req.optionsJSON.applyTo(s); err != nil {
				return err
			}
			if s.Events != nil {
				if err := req.pushJSON.applyTo(s.Events); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return 0, nil, err
		}
	}
	switch {
	case req.Status == nil || *req.Status == sub.status():
	case *req.Status == StatusPaused:
		sub, err = e.PauseSubscription(ctx, id)
	default:
		sub, err = e.ResumeSubscription(ctx, id)
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, e.view(sub), nil
}

func (e *Engine) createSubscription(ctx context.Context, r *http.Request, at target) (int, any, error) {
	pattern, id := at.pattern, at.id
	var req createRequest
	if err := readRequest(r.Body, &req); err != nil {
		return 0, nil, err
	}
	if req.Webhook == "" {
		return 0, nil, invalid("webhook", "webhook is required")
	}
	if req.Secret != "" {
		if err := ValidateSecret(req.Secret); err != nil {
			return 0, nil, err
		}
	}
	tenant, _ := TenantFromContext(ctx)
	sub := &Subscription{ID: id, Pattern: pattern.String(), Webhook: req.Webhook, Name: req.Name, Description: req.Description,
		Delivery: req.Delivery.orDefault(), Signature: req.Signature, Secret: req.Secret, Tenant: tenant}
	if req.Verify {
		sub.Status = StatusPending
	}
	mech, ok := mechanismFor(sub.Delivery)
	if !ok || !mech.transport().offeredOverHTTP() {
		return 0, nil, invalid("delivery", "unknown delivery %q; use %q or %q", req.Delivery, DeliveryWake, DeliveryEvents)
	}
	if err := mech.configure(sub, &req.pushJSON, e.source); err != nil {
		return 0, nil, err
	}
	if req.Retry != nil && sub.Retry == nil {
		sub.Retry = &RetryPolicy{MaxAge: e.cfg.failureGCAfter}
	}
	if err := req.optionsJSON.applyTo(sub); err != nil {
		return 0, nil, err
	}
	start, err := deliverStart(e.source, req.DeliverPolicy, req.Offset)
	if err != nil {
		return 0, nil, err
	}
	sub, created, err := e.create(ctx, sub, pattern, start)
	if err != nil {
		return 0, nil, err
	}
	view := e.view(sub)
	if !created {
		return http.StatusOK, view, nil
	}
	view.WebhookSecret = sub.Secret
	return http.StatusCreated, view, nil
}

// CreateSubscription creates sub for a host that configures subscriptions
// in Go, with the checks of the subscription API's create; a
// DeliveryHandler subscription is created only this way. sub needs ID,
// Pattern, and Webhook or, for DeliveryHandler, Handler. A nil Events of a
// batching mode takes the API's defaults, a nil Retry the mode's default
// policy, and an empty Secret a new one (a Secret given is taken as it
// is: ValidateSecret checks one that a client chose); RateLimit is as
// given, zero for no limit. The subscription starts active, or, if its
// Status is StatusPending, pending verification: a challenge goes to its
// webhook at once (see Verification). Consumers of existing streams
// start at from: "" for each stream's tail, OffsetNone before its first
// event, or an offset.
//
// If sub's ID is taken by a subscription configured alike, it returns that
// one, so that a host may create its subscriptions at every start; if by
// one configured otherwise, or of another tenant, an error wrapping
// ErrSubscriptionExists. An invalid field is a *ValidationError naming it.
//
// Within a tenant (WithTenant), sub is created in it, whatever its Tenant
// says; otherwise in sub.Tenant. A subscription of a tenant must keep to
// its patterns (Tenancy.Patterns), or ErrForbidden, and its limit
// (Tenancy.MaxSubscriptions), or ErrTenantLimit.
func (e *Engine) CreateSubscription(ctx context.Context, sub *Subscription, from string) (*Subscription, error) {
	if err := e.checkLoaded(); err != nil {
		return nil, err
	}
	if err := ValidateSubscriptionID(sub.ID); err != nil {
		return nil, err
	}
	pattern, err := ParsePattern(sub.Pattern)
	if err != nil {
		return nil, asInvalid("pattern", err)
	}
	if from != "" && from != OffsetNone {
		if err := validateOffset(e.source, from); err != nil {
			return nil, err
		}
	}
	s := sub.Clone()
	status := SubscriptionStatus("")
	if s.Status == StatusPending {
		status = StatusPending
	}
	s.Pattern, s.Delivery, s.Status, s.Health = pattern.String(), s.Delivery.orDefault(), status, SubscriptionHealth{}
	if tenant, ok := TenantFromContext(ctx); ok {
		s.Tenant = tenant
	}
	mech, ok := mechanismFor(s.Delivery)
	switch {
	case !ok:
		return nil, invalid("delivery", "unknown delivery %q", s.Delivery)
	case mech.eventOptions() && s.Events == nil:
		s.Events = defaultEventsOptions()
	case !mech.eventOptions() && s.Events != nil:
		return nil, invalid("delivery", "Events applies only to batching deliveries")
	}
	if _, ok := e.source.(EventReader); mech.eventOptions() && !ok {
		return nil, errNoEventReader()
	}
	s, _, err = e.create(ctx, s, pattern, from)
	if err != nil {
		return nil, err
	}
	return s.Clone(), nil
}

// create stores s, whose pattern is pattern, gives it a secret if it has
// none, and adopts the existing streams it matches at start (see
// adoptExistingStreams). If its ID is taken by a subscription configured
// the same, it returns that one and created false; by another, a 409
// error that is ErrSubscriptionExists.
func (e *Engine) create(ctx context.Context, s *Subscription, pattern *Pattern, start string) (sub *Subscription, created bool, err error) {
	// An existing subscription is compared before s is validated, so a
	// repeated create is answered the same way whatever the policy.
	if have, err := e.existing(ctx, s); have != nil || err != nil {
		return have, false, err
	}
	if err := e.validate(s); err != nil {
		return nil, false, err
	}
	if s.Tenant != "" && e.cfg.tenancy != nil && e.cfg.tenancy.MaxSubscriptions > 0 {
		// Counting and creating under one lock keeps this engine's
		// creates from passing the limit together.
		e.tenantCreate.Lock()
		defer e.tenantCreate.Unlock()
		if err := e.checkTenantLimit(ctx, s.Tenant); err != nil {
			return nil, false, err
		}
	}
	if s.Secret == "" {
		s.Secret = newSecret(s.Signature)
	}
	s.CreatedAt = e.clock.Now()
	s.UpdatedAt, s.Verification = s.CreatedAt, nil
	if s.status() == StatusPending {
		s.Verification = newVerification(s.CreatedAt)
	}
	if err := e.store.CreateSubscription(ctx, s); err != nil {
		if errors.Is(err, ErrSubscriptionExists) {
			if have, err := e.existing(ctx, s); have != nil || err != nil {
				return have, false, err
			}
		}
		return nil, false, err
	}
	// Index first: a stream created during the scan below then gets its
	// consumer from StreamCreated, and the scan's create finds it exists.
	e.subs.add(pattern, s)
	if err := e.adoptExistingStreams(ctx, pattern, s.ID, start); err != nil {
		return nil, false, err
	}
	// The mark lets every engine's stream sweep give the streams created
	// since the scan their consumers (sweep.go). Without it the
	// subscription still works; only those streams wait for their next
	// append, or an engine's restart.
	if _, err := e.store.UpdateSubscription(ctx, s.ID, func(s *Subscription) error {
		s.adopted = true
		return nil
	}); err != nil {
		e.log.ErrorContext(ctx, "webhooks: marking a subscription's streams adopted", "subscription_id", s.ID, "error", err)
	}
	if s.Verification != nil {
		e.verifier.kickNow()
	}
	return s, true, nil
}

// readRequest decodes a subscription API request body into v.
func readRequest(body io.Reader, v any) error {
	return decodeRequest(body, v, false)
}

// readOptionalRequest is readRequest for a body that may be empty, which
// leaves v as it is.
func readOptionalRequest(body io.Reader, v any) error {
	return decodeRequest(body, v, true)
}

// decodeRequest reads a request body of at most MaxSubscriptionBodyBytes
// and decodes it strictly into v; an empty body is left alone if optional.
func decodeRequest(body io.Reader, v any, optional bool) error {
	data, err := io.ReadAll(http.MaxBytesReader(nil, io.NopCloser(body), MaxSubscriptionBodyBytes))
	if err != nil {
		return invalid("body", "request body is unreadable or exceeds %d bytes", MaxSubscriptionBodyBytes)
	}
	if optional && len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	return decodeStrict(data, v)
}

// validate checks a subscription about to be stored: its description, its
// tenant and the patterns the tenant may subscribe to, its destination
// (transport.validate), and its options.
func (e *Engine) validate(sub *Subscription) error {
	if len(sub.Description) > MaxDescriptionLength {
		return invalid("description", "description is longer than %d characters", MaxDescriptionLength)
	}
	if len(sub.Name) > MaxNameLength {
		return invalid("name", "name is longer than %d characters", MaxNameLength)
	}
	if sub.status() == StatusPending && !mechanismOf(sub).transport().offeredOverHTTP() {
		return invalid("verify", "only a webhook's endpoint can be verified")
	}
	if err := ValidateTenant(sub.Tenant); err != nil {
		return err
	}
	if err := e.checkTenantPattern(sub); err != nil {
		return err
	}
	if err := mechanismOf(sub).transport().validate(e.x, sub); err != nil {
		return err
	}
	return validateOptions(sub)
}

// deliverStart is the offset at which a new subscription's consumers of
// existing streams start, by its deliver policy: "" for each stream's
// tail.
func deliverStart(source StreamSource, policy, offset string) (string, error) {
	switch policy {
	case "", deliverPolicyNew:
		if offset != "" {
			return "", invalid("offset", "offset applies only to deliver_policy %q", deliverPolicyFrom)
		}
		return "", nil
	case deliverPolicyAll:
		if offset != "" {
			return "", invalid("offset", "offset applies only to deliver_policy %q", deliverPolicyFrom)
		}
		return OffsetNone, nil
	case deliverPolicyFrom:
		if err := validateOffset(source, offset); err != nil {
			return "", err
		}
		return offset, nil
	default:
		return "", invalid("deliver_policy", "unknown deliver_policy %q; use %q, %q or %q", policy, deliverPolicyNew, deliverPolicyAll, deliverPolicyFrom)
	}
}

// existing answers a create for an ID that may be taken: the subscription
// as stored if its configuration is the same, a 409 error that is
// ErrSubscriptionExists if not, and nil, nil if the ID is free.
func (e *Engine) existing(ctx context.Context, want *Subscription) (*Subscription, error) {
	have, err := e.store.GetSubscription(ctx, want.ID)
	if errors.Is(err, ErrSubscriptionNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if have.Tenant != want.Tenant {
		// Nothing of the other tenant's subscription is shown: only that
		// the ID is taken, as one namespace makes it.
		return nil, detail(ErrSubscriptionExists, "subscription id %s is taken; choose another", want.ID)
	}
	if !sameConfiguration(have, want) {
		return nil, detail(ErrSubscriptionExists,
			"subscription %s exists with a different configuration; update it, or delete it, to change it", want.ID)
	}
	return have, nil
}

// sameConfiguration reports whether a and b are configured alike: the
// same pattern, webhook or handler, name, description, mode and options, whatever their
// secrets, status and health. It compares their encodings, which are
// canonical.
func sameConfiguration(a, b *Subscription) bool {
	config := func(s *Subscription) []byte {
		c := Subscription{Delivery: s.Delivery.orDefault(), Handler: s.Handler, Signature: s.signature(), Retry: s.Retry, RateLimit: s.RateLimit, Events: s.Events}
		data, _ := c.MarshalData() // no times, so no error
		return data
	}
	return a.Pattern == b.Pattern && a.Webhook == b.Webhook && a.Name == b.Name && a.Description == b.Description && bytes.Equal(config(a), config(b))
}

// adoptExistingStreams gives each existing stream that matches a new
// subscription an IDLE consumer at start, or at its current tail if start
// is "": existing events are assumed handled, and only new ones wake it.
func (e *Engine) adoptExistingStreams(ctx context.Context, pattern *Pattern, id, start string) error {
	streams, err := e.source.MatchStreams(ctx, pattern)
	if err != nil {
		return fmt.Errorf("listing streams matching %s: %w", pattern, err)
	}
	for _, s := range streams {
		if nameableStreamPath(s.Path) != nil {
			continue // as in StreamCreated
		}
		offset := s.Tail
		if start != "" {
			offset = start
			if err := checkOffset(e.source, "offset", s.Path, start, s.Tail); err != nil {
				// Not an offset of this stream, or past its tail: nothing
				// of it comes after start, so it starts at the tail.
				e.log.WarnContext(ctx, "webhooks: a stream starts at its tail", "subscription_id", id, "stream", s.Path, "reason", err)
				offset = s.Tail
			}
		}
		err := e.store.CreateConsumer(ctx, newConsumer(id, s.Path, offset, e.clock.Now()))
		e.signals.consumerWritten.Send()
		if err != nil && !errors.Is(err, ErrConsumerExists) {
			return fmt.Errorf("creating consumer for %s: %w", s.Path, err)
		}
		if start != "" {
			// Events before the tail are pending.
			if err := e.startIfPending(ctx, ConsumerID(id, s.Path), id); err != nil {
				return fmt.Errorf("starting consumer for %s: %w", s.Path, err)
			}
		}
	}
	return nil
}

// findSubscription returns subscription id if pattern matches its pattern
// and ctx may see it: another tenant's is not found, as a missing one.
func (e *Engine) findSubscription(ctx context.Context, pattern *Pattern, id string) (*Subscription, error) {
	sub, err := e.store.GetSubscription(ctx, id)
	if errors.Is(err, ErrSubscriptionNotFound) || (err == nil && (!pattern.Match(sub.Pattern) || !visible(ctx, sub))) {
		return nil, detail(ErrSubscriptionNotFound, "no subscription %s under %s", id, pattern)
	}
	return sub, err
}

func (e *Engine) deleteSubscription(ctx context.Context, _ *http.Request, at target) (int, any, error) {
	pattern, id := at.pattern, at.id
	sub, err := e.findSubscription(ctx, pattern, id)
	if err != nil {
		return 0, nil, err
	}
	err = e.store.DeleteSubscription(ctx, id)
	e.signals.consumerWritten.Send() // its consumers went with it
	if err != nil {
		if errors.Is(err, ErrSubscriptionNotFound) {
			return 0, nil, detail(ErrSubscriptionNotFound, "no subscription %s under %s", id, pattern)
		}
		return 0, nil, err
	}
	e.subs.remove(sub.ID)
	return http.StatusNoContent, nil, nil
}

func (e *Engine) listSubscriptions(ctx context.Context, _ *http.Request, at target) (int, any, error) {
	pattern := at.pattern
	subs, err := e.store.ListSubscriptions(ctx)
	if err != nil {
		return 0, nil, err
	}
	out := []subscriptionJSON{}
	for _, s := range subs {
		if pattern.Match(s.Pattern) && visible(ctx, s) {
			out = append(out, e.view(s))
		}
	}
	return http.StatusOK, map[string]any{"subscriptions": out}, nil
}

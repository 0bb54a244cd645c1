package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/streamhooks/webhooks/receiver"
)

// The reserved `__ds` API of the upstream Durable Streams protocol
// (sections 6 and 7), served under the host's stream root
// (WithStreamRoot):
//
//	PUT    {root}/__ds/subscriptions/:id                create (201) or re-confirm (200); 409 if different
//	GET    {root}/__ds/subscriptions/:id                read
//	DELETE {root}/__ds/subscriptions/:id                tombstone (204)
//	POST   {root}/__ds/subscriptions/:id/streams        link explicit streams (204)
//	DELETE {root}/__ds/subscriptions/:id/streams/:path  unlink an explicit stream (204)
//	POST   {root}/__ds/subscriptions/:id/callback       webhook callback (callback token)
//	POST   {root}/__ds/subscriptions/:id/claim          pull-wake claim (the Authorizer's OpClaim)
//	POST   {root}/__ds/subscriptions/:id/ack            pull-wake ack or heartbeat (claim token)
//	POST   {root}/__ds/subscriptions/:id/release        pull-wake release (claim token)
//	GET    {root}/__ds/jwks.json                        the webhook signing keys
//
// Stream paths in bodies are stream-root-relative. The routes are in the
// one route table (routes.go), shape shapeReserved.

// The error codes of the reserved API that the engine's other APIs do not
// have, as the protocol spells them.
const (
	codeFenced             receiver.ErrorCode = "FENCED"               // 409
	codeWebhookURLRejected receiver.ErrorCode = "WEBHOOK_URL_REJECTED" // 400
)

// dsPrefix is the reserved API's path prefix under the stream root.
const dsPrefix = "/" + dsReservedSegment + "/"

// dsURL is the public URL of rel under the reserved prefix: the callback
// base's origin, the stream root, "/__ds/", rel.
func (e *Engine) dsURL(rel string) string {
	u := url.URL{Scheme: e.cfg.callbackBase.Scheme, Host: e.cfg.callbackBase.Host, Path: e.cfg.streamRoot + dsPrefix + rel}
	return u.String()
}

// isReservedRequest reports whether r is for the reserved API.
func (e *Engine) isReservedRequest(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, e.cfg.streamRoot+dsPrefix)
}

// ReservedHandler returns the handler of the reserved `__ds` API, for
// requests under "{stream root}/__ds/" (WithStreamRoot). Handler routes
// them to it before anything else.
func (e *Engine) ReservedHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := e.tel.tracer.Start(r.Context(), "webhooks.ds."+strings.ToLower(r.Method))
		defer span.End()
		status, body, err := e.serveReserved(ctx, w, r)
		if err != nil {
			span.SetAttributes(attribute.Int("http.response.status_code", dsStatus(err)))
			span.SetStatus(codes.Error, err.Error())
			e.writeReservedError(w, r, err)
			return
		}
		if status == 0 { // answered already (the JWKS)
			return
		}
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if body == nil {
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(status)
			return
		}
		writeJSON(w, status, body)
	})
}

// dsTarget is what a reserved request names.
type dsTarget struct {
	id   string
	path string // the :path of DELETE …/streams/:path, decoded
}

// parseReserved splits the path of a reserved request, after the prefix,
// into its operation name (the route's query field) and target; ok is
// false for a path no route has.
func parseReserved(escaped string) (name string, at dsTarget, ok bool) {
	if escaped == "jwks.json" {
		return "jwks", at, true
	}
	rest, found := strings.CutPrefix(escaped, "subscriptions/")
	if !found {
		return "", at, false
	}
	rawID, op, _ := strings.Cut(rest, "/")
	id, err := url.PathUnescape(rawID)
	if err != nil || id == "" {
		return "", at, false
	}
	at.id = id
	switch {
	case op == "":
		return "subscription", at, true
	case op == "streams" || op == "callback" || op == "claim" || op == "ack" || op == "release":
		return op, at, true
	case strings.HasPrefix(op, "streams/"):
		p, err := url.PathUnescape(op[len("streams/"):])
		if err != nil || p == "" {
			return "", at, false
		}
		at.path = p
		return "stream", at, true
	}
	return "", at, false
}

// serveReserved finds r's route, asks the Authorizer if the route has an
// operation, and serves it.
func (e *Engine) serveReserved(ctx context.Context, w http.ResponseWriter, r *http.Request) (int, any, error) {
	escaped := strings.TrimPrefix(r.URL.EscapedPath(), escapedRoot(e.cfg.streamRoot)+dsPrefix)
	name, at, ok := parseReserved(escaped)
	if !ok {
		return 0, nil, detail(ErrSubscriptionNotFound, "no reserved route at %s", r.URL.Path)
	}
	rt, allow := findRoute(shapeReserved, name, r.Method)
	// A method no route serves is authorized as a read, as on the other
	// APIs, unless its routes are the token-authenticated or public ones.
	op := OpRead
	if rt != nil {
		op = rt.op
	} else if g, _ := findRoute(shapeReserved, name, strings.Fields(strings.ReplaceAll(allow, ",", " "))[0]); g.op == "" {
		op = ""
	}
	if op != "" && e.cfg.authorizer != nil {
		if err := e.cfg.authorizer(r, op, at.id); err != nil {
			return 0, nil, fmt.Errorf("authorizing %s: %w", op, err)
		}
	}
	if rt == nil {
		return 0, nil, &methodError{allow: allow}
	}
	if name == "jwks" {
		e.serveJWKS(w, r)
		return 0, nil, nil
	}
	if err := e.checkLoaded(); err != nil {
		return 0, nil, err
	}
	if !e.ds.enabled() {
		return 0, nil, detail(ErrSubscriptionNotFound, "this server's store keeps no __ds subscriptions")
	}
	if err := ValidateSubscriptionID(at.id); err != nil {
		return 0, nil, err
	}
	return rt.serveDS(e, ctx, r, at)
}

// escapedRoot is the stream root as it appears in an escaped path.
func escapedRoot(root string) string { return (&url.URL{Path: root}).EscapedPath() }

// dsSubscriptionJSON is a subscription as section 6.3 shows it.
type dsSubscriptionJSON struct {
	ID             string            `json:"id"`
	SubscriptionID string            `json:"subscription_id"`
	Type           DSType            `json:"type"`
	Pattern        *string           `json:"pattern"`
	Streams        []dsLinkJSON      `json:"streams"`
	Webhook        *dsWebhookOutJSON `json:"webhook"`
	WakeStream     *string           `json:"wake_stream"`
	LeaseTTLMS     int64             `json:"lease_ttl_ms"`
	CreatedAt      string            `json:"created_at"`
	Status         DSStatus          `json:"status"`
	Description    *string           `json:"description,omitempty"`
}

// dsLinkJSON is a link as a subscription shows it.
type dsLinkJSON struct {
	Path        string `json:"path"`
	LinkType    string `json:"link_type"`
	AckedOffset string `json:"acked_offset"`
}

// dsWebhookOutJSON is a webhook subscription's delivery, with the signing
// metadata of section 6.3 and never a secret.
type dsWebhookOutJSON struct {
	URL     string        `json:"url"`
	Signing dsSigningJSON `json:"signing"`
}

type dsSigningJSON struct {
	Alg     string `json:"alg"`
	KID     string `json:"kid"`
	JWKSURL string `json:"jwks_url"`
}

// dsView shows sub with its links.
func (e *Engine) dsView(ctx context.Context, sub *DSSubscription) (*dsSubscriptionJSON, error) {
	v := &dsSubscriptionJSON{
		ID: sub.ID, SubscriptionID: sub.ID, Type: sub.Type, LeaseTTLMS: sub.LeaseTTL.Milliseconds(),
		CreatedAt: sub.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z"), Status: sub.Cursor.Status, Streams: []dsLinkJSON{},
	}
	if v.Status == "" {
		v.Status = DSActive
	}
	if sub.Pattern != "" {
		v.Pattern = &sub.Pattern
	}
	if sub.Description != "" {
		v.Description = &sub.Description
	}
	if sub.Type == DSWebhook {
		v.Webhook = &dsWebhookOutJSON{URL: sub.WebhookURL, Signing: dsSigningJSON{
			Alg: string(SignatureEd25519), KID: e.keys.signing(e.clock.Now()).kid, JWKSURL: e.dsURL("jwks.json"),
		}}
	} else {
		v.WakeStream = &sub.WakeStream
	}
	after := ""
	for {
		links, err := e.ds.store.ListDSLinks(ctx, &ListDSLinksParams{ID: sub.ID, After: after, Limit: dsLinkPage})
		if err != nil {
			return nil, err
		}
		for _, l := range links {
			v.Streams = append(v.Streams, dsLinkJSON{Path: l.Path, LinkType: l.Type.String(), AckedOffset: l.AckedOffset})
		}
		if len(links) < dsLinkPage {
			return v, nil
		}
		after = links[len(links)-1].Path
	}
}

// dsTails are the links at their streams' tails, for paths, of type t;
// a stream that does not exist yet is linked before its first event.
func (e *Engine) dsTails(ctx context.Context, paths []string, t DSLinkType) ([]DSLinkSpec, error) {
	out := make([]DSLinkSpec, 0, len(paths))
	for _, p := range paths {
		info, err := e.source.Stream(ctx, e.ds.absolute(p))
		switch {
		case errors.Is(err, ErrStreamNotFound):
			out = append(out, DSLinkSpec{Path: p, Type: t, Offset: OffsetNone})
		case err != nil:
			return nil, err
		default:
			out = append(out, DSLinkSpec{Path: p, Type: t, Offset: info.Tail})
		}
	}
	return out, nil
}

// putDSSubscription answers PUT …/subscriptions/:id (section 6.2).
func (e *Engine) putDSSubscription(ctx context.Context, r *http.Request, at dsTarget) (int, any, error) {
	var req dsSubscriptionRequest
	if err := readRequest(r.Body, &req); err != nil {
		return 0, nil, err
	}
	cfg, err := req.normalize(func(u string) error {
		_, err := e.x.policy.CheckURL(u)
		return err
	})
	if err != nil {
		return 0, nil, err
	}
	for _, p := range cfg.Streams {
		if p == cfg.WakeStream {
			return 0, nil, invalid("streams", "a subscription cannot link its own wake stream %q", p)
		}
	}
	sub := &DSSubscription{
		ID: at.id, Type: DSType(cfg.Type), Pattern: cfg.Pattern, Streams: cfg.Streams, WebhookURL: cfg.WebhookURL,
		WakeStream: cfg.WakeStream, LeaseTTL: cfg.lease(), Description: cfg.Description, ConfigHash: cfg.hash(),
		CreatedAt: e.clock.Now(), Cursor: DSCursor{Status: DSActive},
	}
	links, err := e.dsTails(ctx, cfg.Streams, DSLinkExplicit)
	if err != nil {
		return 0, nil, err
	}
	if cfg.Pattern != "" {
		// Eager backfill: the matching streams, at their tails.
		p, err := ParsePattern(e.ds.absolute(cfg.Pattern))
		if err != nil {
			return 0, nil, asInvalid("pattern", err)
		}
		found, err := e.source.MatchStreams(ctx, p)
		if err != nil {
			return 0, nil, err
		}
		for _, s := range found {
			rel, ok := e.ds.relative(s.Path)
			if ok && sub.matches(rel) {
				links = append(links, DSLinkSpec{Path: rel, Type: DSLinkGlob, Offset: s.Tail})
			}
		}
	}
	stored, created, err := e.ds.store.PutDSSubscription(ctx, &PutDSSubscriptionParams{Subscription: sub, Links: links})
	if err != nil {
		return 0, nil, err
	}
	e.ds.remember(stored.ID, stored)
	view, err := e.dsView(ctx, stored)
	if err != nil {
		return 0, nil, err
	}
	if created {
		return http.StatusCreated, view, nil
	}
	return http.StatusOK, view, nil
}

// getDSSubscription answers GET …/subscriptions/:id (section 6.3).
func (e *Engine) getDSSubscription(ctx context.Context, _ *http.Request, at dsTarget) (int, any, error) {
	sub, err := e.ds.store.GetDSSubscription(ctx, at.id)
	if err != nil {
		return 0, nil, err
	}
	view, err := e.dsView(ctx, sub)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, view, nil
}

// deleteDSSubscription answers DELETE …/subscriptions/:id: a tombstone.
func (e *Engine) deleteDSSubscription(ctx context.Context, _ *http.Request, at dsTarget) (int, any, error) {
	if err := e.ds.store.DeleteDSSubscription(ctx, at.id); err != nil {
		return 0, nil, err
	}
	e.ds.remember(at.id, nil)
	return http.StatusNoContent, nil, nil
}

// dsStreamsRequest is the body of POST …/streams.
type dsStreamsRequest struct {
	Streams []string `json:"streams"`
}

// addDSStreams answers POST …/streams (section 6.4).
func (e *Engine) addDSStreams(ctx context.Context, r *http.Request, at dsTarget) (int, any, error) {
	var req dsStreamsRequest
	if err := readRequest(r.Body, &req); err != nil {
		return 0, nil, err
	}
	if len(req.Streams) == 0 {
		return 0, nil, invalid("streams", "streams must name at least one stream")
	}
	sub, err := e.ds.store.GetDSSubscription(ctx, at.id)
	if err != nil {
		return 0, nil, err
	}
	for _, p := range req.Streams {
		if err := checkRelativePath("streams", p); err != nil {
			return 0, nil, err
		}
		if p == sub.WakeStream {
			return 0, nil, invalid("streams", "a subscription cannot link its own wake stream %q", p)
		}
	}
	links, err := e.dsTails(ctx, req.Streams, DSLinkExplicit)
	if err != nil {
		return 0, nil, err
	}
	if err := e.ds.store.LinkDSStreams(ctx, &LinkDSStreamsParams{ID: at.id, Links: links}); err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, nil
}

// removeDSStream answers DELETE …/streams/:path (section 6.4).
func (e *Engine) removeDSStream(ctx context.Context, _ *http.Request, at dsTarget) (int, any, error) {
	if err := checkRelativePath("path", at.path); err != nil {
		return 0, nil, err
	}
	sub, err := e.ds.store.GetDSSubscription(ctx, at.id)
	if err != nil {
		return 0, nil, err
	}
	err = e.ds.store.UnlinkDSStream(ctx, &UnlinkDSStreamParams{ID: at.id, Path: at.path, PatternMatches: sub.matches(at.path)})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, nil
}

// dsAckRequest is the body of a callback, an ack or a release.
type dsAckRequest struct {
	WakeID     string      `json:"wake_id"`
	Generation *int64      `json:"generation"`
	Acks       []dsAckJSON `json:"acks"`
	Done       bool        `json:"done"`
}

type dsAckJSON struct {
	Stream string `json:"stream"`
	Offset string `json:"offset"`
}

// dsAckResponse answers a callback or an ack.
type dsAckResponse struct {
	OK       bool `json:"ok"`
	NextWake bool `json:"next_wake"`
}

// errDSFencedRequest refuses a token of another wake: 409 FENCED.
var errDSFencedRequest = &DSFencedError{}

// dsAuthorize checks the bearer token of a callback, ack or release of
// subscription id against the request's generation and wake (section
// 7.3): a token of another subscription is invalid; one of another wake is
// fenced.
func (e *Engine) dsAuthorize(r *http.Request, id string, req *dsAckRequest) error {
	raw, ok := bearerToken(r)
	if !ok {
		return refuse(receiver.CodeTokenInvalid, "an Authorization: Bearer token is required")
	}
	claims, err := e.tokens.verify(raw)
	if errors.Is(err, errTokenExpired) {
		return refuse(receiver.CodeTokenExpired, "the token has expired")
	}
	if err != nil || claims.Subject != dsTokenSubject(id) {
		return refuse(receiver.CodeTokenInvalid, "the token is not valid for this subscription")
	}
	if req.Generation == nil || req.WakeID == "" {
		return invalid("generation", "wake_id and generation are required")
	}
	if claims.Epoch != *req.Generation || claims.WakeID != req.WakeID {
		return errDSFencedRequest
	}
	return nil
}

// readAck reads and checks the body of a callback, ack or release.
func readAck(r *http.Request, release bool) (*dsAckRequest, error) {
	var req dsAckRequest
	if err := readRequest(r.Body, &req); err != nil {
		return nil, err
	}
	if release && (len(req.Acks) > 0 || req.Done) {
		return nil, invalid("acks", "a release takes only wake_id and generation")
	}
	for _, a := range req.Acks {
		if err := checkRelativePath("acks.stream", a.Stream); err != nil {
			return nil, err
		}
		if a.Offset == "" || (a.Offset != OffsetNone && !validOffset(nil, a.Offset)) {
			return nil, invalidOffset("acks.offset", "offset %q is not an offset", a.Offset)
		}
	}
	return &req, nil
}

// dsAck answers a callback (webhook) or an ack (pull-wake), which are one
// operation under two names (sections 7.1 and 7.2).
func (e *Engine) dsAck(ctx context.Context, r *http.Request, at dsTarget) (int, any, error) {
	req, err := readAck(r, false)
	if err != nil {
		return 0, nil, err
	}
	if err := e.dsAuthorize(r, at.id, req); err != nil {
		return 0, nil, err
	}
	sub, err := e.ds.store.GetDSSubscription(ctx, at.id)
	if err != nil {
		return 0, nil, err
	}
	now := e.clock.Now()
	p := &AckDSParams{ID: at.id, Generation: *req.Generation, WakeID: req.WakeID, Done: req.Done, Now: now}
	if !req.Done {
		p.LeaseUntil = now.Add(sub.LeaseTTL)
	}
	for _, a := range req.Acks {
		p.Acks = append(p.Acks, DSAck{Path: a.Stream, Offset: a.Offset})
	}
	cur, err := e.ds.store.AckDS(ctx, p)
	if err != nil {
		return 0, nil, err
	}
	next := req.Done && cur.Pending
	// Both the next wake and a heartbeat's lease end, which may come
	// before the retry the scheduler waits for, are new due times.
	e.ds.poke()
	return http.StatusOK, dsAckResponse{OK: true, NextWake: next}, nil
}

// dsRelease answers POST …/release (section 7.2).
func (e *Engine) dsRelease(ctx context.Context, r *http.Request, at dsTarget) (int, any, error) {
	req, err := readAck(r, true)
	if err != nil {
		return 0, nil, err
	}
	if err := e.dsAuthorize(r, at.id, req); err != nil {
		return 0, nil, err
	}
	cur, err := e.ds.store.ReleaseDS(ctx, &ReleaseDSParams{ID: at.id, Generation: *req.Generation, WakeID: req.WakeID, Now: e.clock.Now()})
	if err != nil {
		return 0, nil, err
	}
	if cur.Pending {
		e.ds.poke()
	}
	return http.StatusNoContent, nil, nil
}

// dsClaimRequest is the body of a claim.
type dsClaimRequest struct {
	Worker string `json:"worker"`
}

// dsClaimResponse answers a successful claim.
type dsClaimResponse struct {
	WakeID     string         `json:"wake_id"`
	Generation int64          `json:"generation"`
	Token      string         `json:"token"`
	Streams    []dsStreamJSON `json:"streams"`
	LeaseTTLMS int64          `json:"lease_ttl_ms"`
}

// maxWorkerName bounds a claim's worker name.
const maxWorkerName = 256

// dsClaim answers POST …/claim (section 7.2).
func (e *Engine) dsClaim(ctx context.Context, r *http.Request, at dsTarget) (int, any, error) {
	var req dsClaimRequest
	if err := readRequest(r.Body, &req); err != nil {
		return 0, nil, err
	}
	if req.Worker == "" || len(req.Worker) > maxWorkerName {
		return 0, nil, invalid("worker", "worker must name the worker, in at most %d bytes", maxWorkerName)
	}
	sub, err := e.ds.store.GetDSSubscription(ctx, at.id)
	if err != nil {
		return 0, nil, err
	}
	if sub.Type != DSPullWake {
		return 0, nil, invalid("type", "only a %q subscription is claimed", DSPullWake)
	}
	now := e.clock.Now()
	cur, err := e.ds.store.ClaimDS(ctx, &ClaimDSParams{ID: at.id, Worker: req.Worker, WakeID: newWakeID(), Now: now, LeaseUntil: now.Add(sub.LeaseTTL)})
	if err != nil {
		return 0, nil, err
	}
	token, err := e.tokens.issue(dsTokenSubject(at.id), cur.Generation, cur.WakeID)
	if err != nil {
		return 0, nil, err
	}
	links, err := e.ds.pendingLinks(ctx, at.id)
	if err != nil {
		return 0, nil, err
	}
	e.ds.poke() // the lease's end is the subscription's next due time
	return http.StatusOK, dsClaimResponse{
		WakeID: cur.WakeID, Generation: cur.Generation, Token: token, Streams: dsStreamsJSON(links),
		LeaseTTLMS: sub.LeaseTTL.Milliseconds(),
	}, nil
}

// dsErrorJSON is the reserved API's error shape. FENCED and
// ALREADY_CLAIMED are exactly as sections 7.1 and 7.2 write them; the
// other codes add a message.
type dsErrorJSON struct {
	Error dsErrorBody `json:"error"`
}

type dsErrorBody struct {
	Code          receiver.ErrorCode `json:"code"`
	Message       string             `json:"message,omitempty"`
	CurrentHolder string             `json:"current_holder,omitempty"`
	Generation    *int64             `json:"generation,omitempty"`
}

// dsStatus is the status err is answered with.
func dsStatus(err error) int {
	status, _ := dsWireError(err)
	return status
}

// dsWireError maps err to the reserved API's status and body; what it
// does not know, httpError maps.
func dsWireError(err error) (int, *dsErrorJSON) {
	var (
		claimed *DSClaimedError
		url     *dsURLRejected
	)
	switch {
	case errors.Is(err, ErrDSFenced):
		return http.StatusConflict, &dsErrorJSON{dsErrorBody{Code: codeFenced}}
	case errors.As(err, &claimed):
		g := claimed.Generation
		return http.StatusConflict, &dsErrorJSON{dsErrorBody{Code: receiver.CodeAlreadyClaimed, CurrentHolder: claimed.Holder, Generation: &g}}
	case errors.As(err, &url):
		return http.StatusBadRequest, &dsErrorJSON{dsErrorBody{Code: codeWebhookURLRejected, Message: url.reason}}
	case errors.Is(err, ErrDSSubscriptionNotFound):
		return http.StatusNotFound, &dsErrorJSON{dsErrorBody{Code: codeSubscriptionNotFound, Message: "no such subscription"}}
	case errors.Is(err, ErrDSSubscriptionConflict):
		return http.StatusConflict, &dsErrorJSON{dsErrorBody{Code: codeSubscriptionConflict, Message: "the subscription exists with a different configuration"}}
	case errors.Is(err, ErrDSNotLinked):
		return http.StatusBadRequest, &dsErrorJSON{dsErrorBody{Code: receiver.CodeInvalidRequest, Message: "an ack names a stream the subscription does not link"}}
	}
	we := httpError(err)
	return we.status, &dsErrorJSON{dsErrorBody{Code: we.code, Message: we.message}}
}

// writeReservedError answers err in the reserved API's error shape,
// logging what the client does not see, as writeError does.
func (e *Engine) writeReservedError(w http.ResponseWriter, r *http.Request, err error) {
	status, body := dsWireError(err)
	we := httpError(err)
	switch {
	case errors.Is(err, ErrStoreUnavailable):
		e.outages.failed(r, err)
	case status == http.StatusInternalServerError:
		e.log.ErrorContext(r.Context(), "webhooks: request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	for k, v := range we.header {
		w.Header()[k] = v
	}
	writeJSON(w, status, body)
}

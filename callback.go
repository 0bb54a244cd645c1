package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/streamhooks/webhooks/receiver"
)

// Limits on callbacks and consumers, so that no request can grow memory
// without bound. Each limit is inclusive; a request past one is refused
// with 400 INVALID_REQUEST and a message naming the limit.
const (
	// MaxCallbackBodyBytes bounds a callback request body, in bytes.
	MaxCallbackBodyBytes = 64 << 10
	// MaxCallbackListLength bounds each of acks, subscribe and unsubscribe
	// in one callback.
	MaxCallbackListLength = 256
	// MaxStreamsPerConsumer bounds the streams one consumer subscribes to,
	// its primary stream included.
	MaxStreamsPerConsumer = 1024
	// MaxStreamPathLength bounds a stream path, in bytes: in a callback
	// and in a consumer ID. A longer stream gets no consumers, since they
	// could not ack it.
	MaxStreamPathLength = 1024
	// MaxOffsetLength bounds an offset in a callback, in bytes. The host's
	// offsets must fit in it to be acked.
	MaxOffsetLength = 256
)

// callbackSegment precedes the consumer ID in every callback URL.
const callbackSegment = "/callback/"

// CallbackHandler returns the handler of the callback API. Mount it so that
// it sees the callback URLs the engine hands out: base + "/callback/{id}".
// It reads the consumer ID from the raw, percent-encoded path, so the host's
// router must not rewrite the path.
func (e *Engine) CallbackHandler() http.Handler {
	return http.HandlerFunc(e.serveCallback)
}

func (e *Engine) serveCallback(w http.ResponseWriter, r *http.Request) {
	ctx, span := e.tel.tracer.Start(r.Context(), "webhooks.callback")
	defer span.End()
	resp, err := e.callback(ctx, r)
	code := "OK"
	if err != nil {
		code = string(httpError(err).code)
	}
	e.tel.callbackDone(ctx, span, code)
	if err != nil {
		e.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// callback authenticates, decodes and applies one callback request.
func (e *Engine) callback(ctx context.Context, r *http.Request) (*successResponse, error) {
	if err := e.checkLoaded(); err != nil {
		return nil, err
	}
	if rt, allow := findRoute(shapeCallback, "", r.Method); rt == nil {
		return nil, &methodError{allow: allow}
	}
	id, err := callbackConsumerID(r.URL.EscapedPath())
	if err != nil {
		return nil, invalid("consumer_id", "%v", err)
	}
	raw, ok := bearerToken(r)
	if !ok {
		return nil, refuse(receiver.CodeTokenInvalid, "missing bearer token")
	}
	claims, terr := e.tokens.verify(raw)
	if errors.Is(terr, errTokenInvalid) {
		return nil, refuse(receiver.CodeTokenInvalid, "%v", terr)
	}
	if claims.Subject != id {
		return nil, refuse(receiver.CodeTokenInvalid, "token was not issued for this consumer")
	}
	req, err := decodeCallbackRequest(http.MaxBytesReader(nil, r.Body, MaxCallbackBodyBytes))
	if err != nil {
		return nil, err
	}
	expired := errors.Is(terr, errTokenExpired)
	subID, _, _ := ParseConsumerID(id) // canonical: callbackConsumerID parsed it
	sub, err := e.subscription(ctx, subID)
	if errors.Is(err, ErrSubscriptionNotFound) {
		err = ErrConsumerNotFound // it took its consumers with it
	}
	var c *Consumer
	if err == nil {
		c, err = e.core.update(ctx, id, func(c *Consumer) (change, error) {
			return e.applyCallback(ctx, c, e.latest(sub), claims, expired, req)
		})
	}
	if errors.Is(err, ErrConsumerNotFound) {
		return nil, refuse(receiver.CodeConsumerGone, "consumer %s no longer exists", id)
	}
	if err != nil {
		return nil, err
	}
	token, err := e.tokens.renew(raw, claims)
	if err != nil {
		return nil, err
	}
	resp := &successResponse{OK: true, Token: token, Streams: []StreamOffset{}}
	if c != nil {
		resp.Streams = c.Streams
	}
	return resp, nil
}

// applyCallback checks a callback of consumer c, of sub, against c and
// makes its transition, atomic in one UpdateConsumer: it fails as a whole
// or applies as a whole.
func (e *Engine) applyCallback(ctx context.Context, c *Consumer, sub *Subscription, claims *tokenClaims, expired bool, req *receiver.CallbackRequest) (change, error) {
	if c.State == StateFailed {
		// A dead letter is removed from the wake cycle, as spec 001's
		// failure GC removes the consumer; only its cursor is kept.
		return noChange, refuse(receiver.CodeConsumerGone, "consumer %s is a dead letter after continuous delivery failure", c.ID)
	}
	// A token is bound to the epoch it was issued at, as the request is:
	// either of another epoch is a zombie's (S6), whatever else it claims.
	// Its signature is valid, so this is STALE_EPOCH, not TOKEN_INVALID,
	// and the consumer learns to stop.
	if claims.Epoch != c.Epoch {
		return noChange, refuse(receiver.CodeStaleEpoch, "token was issued for epoch %d; current epoch is %d", claims.Epoch, c.Epoch)
	}
	if *req.Epoch < c.Epoch {
		return noChange, refuse(receiver.CodeStaleEpoch, "epoch %d is stale; current epoch is %d", *req.Epoch, c.Epoch)
	}
	if *req.Epoch > c.Epoch {
		return noChange, refuse(receiver.CodeStaleEpoch, "epoch %d is ahead of the current epoch %d", *req.Epoch, c.Epoch)
	}
	if claims.WakeID != c.WakeID {
		// Same ID and epoch, another wake: the consumer was removed and
		// spawned again, and this token is of the earlier one.
		return noChange, refuse(receiver.CodeStaleEpoch, "token is of an earlier consumer with this ID")
	}
	if expired {
		token, err := e.tokens.issue(c.ID, c.Epoch, c.WakeID)
		if err != nil {
			return noChange, err
		}
		pe := refuse(receiver.CodeTokenExpired, "token has expired; retry with the new token")
		pe.token = token
		return noChange, pe
	}
	if req.WakeID != "" && req.WakeID != c.WakeID {
		return noChange, refuse(receiver.CodeAlreadyClaimed, "wake_id %q is not the current wake", req.WakeID)
	}
	t, err := e.core.readTails(ctx, callbackPaths(c, req))
	if err != nil {
		return noChange, err
	}
	return e.core.rules.callback(c, sub, req, t, e.source, e.clock.Now())
}

// callback is the transition of c, of sub, that a current callback req
// makes, with the tails t of the streams it names.
func (m *cursorMachine) callback(c *Consumer, sub *Subscription, req *receiver.CallbackRequest, t tails, source StreamSource, now time.Time) (change, error) {
	if c.State == stateDelivering {
		// A current-epoch token reaches only the woken consumer, so any
		// callback from it claims the wake, with or without wake_id.
		m.goLive(c, now)
	}
	for _, p := range req.Subscribe {
		if streamIndex(c.Streams, p) >= 0 {
			continue
		}
		offset := OffsetNone
		if info, ok := t[p]; ok {
			offset = info.Tail
		}
		c.Streams = append(c.Streams, StreamOffset{Path: p, Offset: offset})
		// The wake's tail of p, if any, may be that of a stream since
		// deleted: a synchronous done must not ack the new one to it.
		c.WakeTails = slices.DeleteFunc(c.WakeTails, func(s StreamOffset) bool { return s.Path == p })
	}
	if len(c.Streams) > MaxStreamsPerConsumer {
		return noChange, invalid("subscribe", "a consumer may subscribe to at most %d streams", MaxStreamsPerConsumer)
	}
	for _, a := range req.Acks {
		if err := m.ack(c, a, t, source); err != nil {
			return noChange, err
		}
	}
	c.Streams = slices.DeleteFunc(c.Streams, func(s StreamOffset) bool { return slices.Contains(req.Unsubscribe, s.Path) })
	if len(c.Streams) == 0 {
		return changeDelete, nil
	}
	ch := changeSave
	if req.Done && c.State == StateLive {
		ch = m.finish(c, sub, t, now)
	}
	m.touch(c, now)
	return ch, nil
}

// ack moves one stream's acked offset forward. An older offset is accepted
// and changes nothing, so retried acks are idempotent and offsets never move
// backwards (S4). The offset must be one the source could have produced.
// An ack of a stream the consumer does not hold, as one it has just
// unsubscribed from, is ignored as the reference servers do: it moves no
// cursor, and spec 001 names no error for it.
func (m *cursorMachine) ack(c *Consumer, a StreamOffset, t tails, source StreamSource) error {
	i := streamIndex(c.Streams, a.Path)
	if i < 0 {
		return nil
	}
	if a.Offset == OffsetNone {
		return nil
	}
	info, ok := t[a.Path]
	if !ok {
		return invalidOffset("acks", "cannot ack %s: the stream does not exist", a.Path)
	}
	if err := checkOffset(source, "acks", a.Path, a.Offset, info.Tail); err != nil {
		return err
	}
	if compareOffsets(a.Offset, c.Streams[i].Offset) > 0 {
		c.Streams[i].Offset = a.Offset
	}
	return nil
}

// decodeCallbackRequest decodes a callback body strictly: one JSON object,
// no unknown fields, epoch present, every list and string within limits.
func decodeCallbackRequest(body io.Reader) (*receiver.CallbackRequest, error) {
	data, err := io.ReadAll(body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, invalid("body", "request body exceeds %d bytes", MaxCallbackBodyBytes)
		}
		return nil, invalid("body", "cannot read request body")
	}
	var req receiver.CallbackRequest
	if err := decodeStrict(data, &req); err != nil {
		return nil, err
	}
	if req.Epoch == nil {
		return nil, invalid("epoch", "epoch is required")
	}
	if err := validateCallbackRequest(&req); err != nil {
		return nil, err
	}
	return &req, nil
}

func validateCallbackRequest(req *receiver.CallbackRequest) error {
	for name, n := range map[string]int{"acks": len(req.Acks), "subscribe": len(req.Subscribe), "unsubscribe": len(req.Unsubscribe)} {
		if n > MaxCallbackListLength {
			return invalid(name, "%s has %d entries; at most %d are allowed", name, n, MaxCallbackListLength)
		}
	}
	for _, a := range req.Acks {
		if err := nameableStreamPath(a.Path); err != nil {
			return invalid("acks", "acks: %v", err)
		}
		if a.Offset == "" || len(a.Offset) > MaxOffsetLength {
			return invalid("acks", "acks: offset of %s must be 1 to %d characters", a.Path, MaxOffsetLength)
		}
	}
	for _, p := range append(slices.Clip(req.Subscribe), req.Unsubscribe...) {
		if err := nameableStreamPath(p); err != nil {
			return invalid("subscribe", "subscribe/unsubscribe: %v", err)
		}
	}
	// Acks and unsubscribes may still name a stream that an older release
	// gave a consumer; no new subscription may.
	for _, p := range req.Subscribe {
		var ve *ValidationError
		if errors.As(ValidateStreamPath(p), &ve) {
			return invalid("subscribe", "subscribe: %s", ve.Reason)
		}
	}
	return nil
}

// decodeStrict decodes a request body: one JSON value, no unknown fields.
// Its error is a ValidationError of the body.
func decodeStrict(data []byte, v any) error {
	if err := decodeJSON(data, v); err != nil {
		return invalid("body", "malformed JSON body: %v", err)
	}
	return nil
}

// callbackConsumerID returns the canonical consumer ID from the escaped path
// of a callback URL. The ID contains no raw '/', so the last "/callback/"
// starts it, wherever the host mounts the handler.
func callbackConsumerID(escapedPath string) (string, error) {
	i := strings.LastIndex(escapedPath, callbackSegment)
	if i < 0 {
		return "", errors.New("callback URL has no consumer id")
	}
	sub, path, err := ParseConsumerID(escapedPath[i+len(callbackSegment):])
	if err != nil {
		return "", err
	}
	return ConsumerID(sub, path), nil
}

func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers with the one JSON error shape (httpError). Errors
// that it does not know are logged and answered with a generic 500, and
// those of a Store that cannot be reached with a sampled log and a 503:
// internal error text never reaches clients.
func (e *Engine) writeError(w http.ResponseWriter, r *http.Request, err error) {
	we := httpError(err)
	switch {
	case errors.Is(err, ErrStoreUnavailable):
		e.outages.failed(r, err)
	case we.code == codeInternal:
		e.log.ErrorContext(r.Context(), "webhooks: request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	for k, v := range we.header {
		w.Header()[k] = v
	}
	writeJSON(w, we.status, receiver.CallbackResponse{OK: false, Error: &receiver.ErrorBody{Code: we.code, Message: we.message}, Token: we.token})
}

// callbackPaths lists the streams whose tails a callback needs: those it
// subscribes to or acks of its own, and all of them if it may finish the
// cycle.
func callbackPaths(c *Consumer, req *receiver.CallbackRequest) []string {
	paths := slices.Clone(req.Subscribe)
	for _, a := range req.Acks {
		if streamIndex(c.Streams, a.Path) >= 0 {
			paths = append(paths, a.Path)
		}
	}
	if req.Done {
		paths = append(paths, streamPaths(c)...)
	}
	return paths
}

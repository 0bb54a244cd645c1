package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// MaxNotificationBytes bounds the notification body ParseNotification reads.
const MaxNotificationBytes = 1 << 20

// maxCallbackResponseBytes bounds the callback response bodies read.
const maxCallbackResponseBytes = 1 << 20

// ParseNotification reads the body of a wake-up webhook request, verifies
// its signature with secret at now (DefaultSignatureTolerance), and decodes
// it. Answer 401 when the error wraps ErrInvalidSignature, else 400.
// Unknown fields are ignored, so consumers keep working when the server
// adds some.
func ParseNotification(r *http.Request, secret string, now time.Time) (*Notification, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxNotificationBytes+1))
	if err != nil {
		return nil, fmt.Errorf("webhooks: reading notification: %w", err)
	}
	if len(body) > MaxNotificationBytes {
		return nil, fmt.Errorf("webhooks: notification exceeds %d bytes", MaxNotificationBytes)
	}
	if err := VerifySignature(secret, r.Header.Get(SignatureHeader), body, now, DefaultSignatureTolerance); err != nil {
		return nil, err
	}
	var n Notification
	if err := decodeJSON(body, &n, false); err != nil {
		return nil, fmt.Errorf("webhooks: decoding notification: %w", err)
	}
	switch {
	case n.ConsumerID == "":
		return nil, errors.New("webhooks: notification has no consumer_id")
	case n.WakeID == "":
		return nil, errors.New("webhooks: notification has no wake_id")
	case n.Callback == "":
		return nil, errors.New("webhooks: notification has no callback")
	case n.Token == "":
		return nil, errors.New("webhooks: notification has no token")
	}
	return &n, nil
}

// decodeJSON decodes exactly one JSON value from data into v. If strict,
// the body must be valid UTF-8, which encoding/json would silently repair,
// and every object key must be exactly the json name of a field of the
// struct it decodes into: encoding/json matches names regardless of case.
func decodeJSON(data []byte, v any, strict bool) error {
	if strict && !utf8.Valid(data) {
		return errors.New("body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after JSON value")
	}
	if strict {
		var tree any
		if err := json.Unmarshal(data, &tree); err != nil {
			return err
		}
		return exactKeys(tree, reflect.TypeOf(v))
	}
	return nil
}

// exactKeys checks the keys of the objects in v, a JSON value decoded into
// any, against the json names of the fields of t, the type v was decoded
// into. Keys are checked in sorted order, so the error is stable.
func exactKeys(v any, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch v := v.(type) {
	case map[string]any:
		if t.Kind() != reflect.Struct {
			return nil
		}
		for _, k := range slices.Sorted(maps.Keys(v)) {
			f, ok := jsonField(t, k)
			if !ok {
				return fmt.Errorf("json: unknown field %q (names are case-sensitive)", k)
			}
			if err := exactKeys(v[k], f.Type); err != nil {
				return err
			}
		}
	case []any:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for _, e := range v {
				if err := exactKeys(e, t.Elem()); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// jsonField returns the exported field of the struct type t whose json
// name is exactly name.
func jsonField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		if n, _, _ := strings.Cut(tag, ","); n == name || (n == "" && f.Name == name) {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// CallbackError is a callback the server refused. Match codes with
// errors.As and a comparison of Code, e.g. Code == CodeStaleEpoch, upon
// which the consumer should stop. Code is empty if the response carried
// no error body, as from a proxy.
type CallbackError struct {
	StatusCode int
	Code       ErrorCode
	Message    string
}

// Error implements error.
func (e *CallbackError) Error() string {
	return fmt.Sprintf("webhooks: callback failed: %d %s: %s", e.StatusCode, e.Code, e.Message)
}

// CallbackClient makes the callbacks of one wake. It fills in the epoch and
// claims the wake on the first successful call, and keeps the freshest
// bearer token. It is safe for concurrent use.
type CallbackClient struct {
	hc    *http.Client
	url   string
	epoch int64

	mu       sync.Mutex
	token    string
	tokenSeq uint64 // seq of the call that yielded token; 0 = notification
	seq      uint64 // calls started so far
	wakeID   string // sent until a call succeeds
}

// NewCallbackClient returns a client for the callbacks of the verified
// notification n, sending them with hc, or http.DefaultClient if hc is nil.
func NewCallbackClient(n *Notification, hc *http.Client) *CallbackClient {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &CallbackClient{hc: hc, url: n.Callback, epoch: n.Epoch, token: n.Token, wakeID: n.WakeID}
}

// Token returns the freshest bearer token the client holds.
func (c *CallbackClient) Token() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.token
}

// Send posts req to the callback URL. It sets req.Epoch to the
// notification's epoch and req.WakeID to its wake ID until a call has
// succeeded. A TOKEN_EXPIRED refusal is retried once with the token it
// carries. Refusals are returned as *CallbackError.
func (c *CallbackClient) Send(ctx context.Context, req CallbackRequest) (*CallbackResponse, error) {
	resp, err := c.send(ctx, req)
	var ce *CallbackError
	if errors.As(err, &ce) && ce.Code == CodeTokenExpired && resp != nil && resp.Token != "" {
		resp, err = c.send(ctx, req)
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// Ack acknowledges offsets as processed through, inclusive.
func (c *CallbackClient) Ack(ctx context.Context, offsets ...StreamOffset) (*CallbackResponse, error) {
	return c.Send(ctx, CallbackRequest{Acks: offsets})
}

// Done tells the server that processing is complete.
func (c *CallbackClient) Done(ctx context.Context) (*CallbackResponse, error) {
	return c.Send(ctx, CallbackRequest{Done: true})
}

// send makes one call. On a refusal it returns the decoded response, if
// any, along with the *CallbackError.
func (c *CallbackClient) send(ctx context.Context, req CallbackRequest) (*CallbackResponse, error) {
	c.mu.Lock()
	c.seq++
	seq, token := c.seq, c.token
	req.WakeID = c.wakeID
	c.mu.Unlock()
	epoch := c.epoch
	req.Epoch = &epoch

	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("webhooks: encoding callback: %w", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("webhooks: callback: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Authorization", "Bearer "+token)
	hresp, err := c.hc.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("webhooks: callback: %w", err)
	}
	defer hresp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(hresp.Body, maxCallbackResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("webhooks: reading callback response: %w", err)
	}
	if len(data) > maxCallbackResponseBytes {
		return nil, fmt.Errorf("webhooks: callback response exceeds %d bytes", maxCallbackResponseBytes)
	}
	success := hresp.StatusCode/100 == 2
	var resp CallbackResponse
	if err := decodeJSON(data, &resp, false); err != nil {
		if success {
			return nil, fmt.Errorf("webhooks: decoding callback response: %w", err)
		}
		return nil, &CallbackError{StatusCode: hresp.StatusCode, Message: http.StatusText(hresp.StatusCode)}
	}

	c.mu.Lock()
	if resp.Token != "" && seq > c.tokenSeq {
		c.token, c.tokenSeq = resp.Token, seq
	}
	if success && resp.OK {
		c.wakeID = ""
	}
	c.mu.Unlock()

	if !success || !resp.OK {
		ce := &CallbackError{StatusCode: hresp.StatusCode}
		if resp.Error != nil {
			ce.Code, ce.Message = resp.Error.Code, resp.Error.Message
		}
		return &resp, ce
	}
	return &resp, nil
}

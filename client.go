package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
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
	if !strict {
		// Unmarshal refuses trailing data too, in one pass fewer.
		return json.Unmarshal(data, v)
	}
	if !utf8.Valid(data) {
		return errors.New("body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after JSON value")
	}
	return exactKeys(data, reflect.TypeOf(v))
}

// exactKeys checks the object keys of data, one valid JSON value that was
// decoded into a value of type t, against the json names of the fields of
// the structs they decoded into. The keys of an object are checked in
// sorted order, so the error is stable. It walks data in place and
// allocates only to unquote a key with escapes.
func exactKeys(data []byte, t reflect.Type) error {
	_, err := keysOf(data, skipSpace(data, 0), t)
	return err
}

// keysOf checks the value of type t at data[i:] and returns where it ends.
// A nil t checks nothing.
func keysOf(data []byte, i int, t reflect.Type) (int, error) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch data[i] {
	case '{':
		var fields map[string]reflect.Type
		if t != nil && t.Kind() == reflect.Struct {
			fields = jsonFields(t)
		}
		var (
			firstErr error
			firstKey string
		)
		i = skipSpace(data, i+1)
		for data[i] != '}' {
			end := stringEnd(data, i)
			key, err := jsonKey(data[i:end])
			if err != nil {
				return 0, err
			}
			i = skipSpace(data, skipSpace(data, end)+1) // past ':'
			var ft reflect.Type
			known := true
			if fields != nil {
				ft, known = fields[key]
			}
			if !known {
				err = fmt.Errorf("json: unknown field %q (names are case-sensitive)", key)
			}
			if i, err = keysValue(data, i, ft, err); err != nil && (firstErr == nil || key < firstKey) {
				firstErr, firstKey = err, key
			}
			i = skipSpace(data, i)
			if data[i] == ',' {
				i = skipSpace(data, i+1)
			}
		}
		return i + 1, firstErr
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		var firstErr error
		i = skipSpace(data, i+1)
		for data[i] != ']' {
			var err error
			if i, err = keysOf(data, i, elem); err != nil && firstErr == nil {
				firstErr = err
			}
			i = skipSpace(data, i)
			if data[i] == ',' {
				i = skipSpace(data, i+1)
			}
		}
		return i + 1, firstErr
	case '"':
		return stringEnd(data, i), nil
	default:
		for i < len(data) && !strings.ContainsRune(",}] \t\r\n", rune(data[i])) {
			i++
		}
		return i, nil
	}
}

// keysValue checks the value at data[i:] of a key whose own error, if any,
// is keyErr, and returns where the value ends and the key's error.
func keysValue(data []byte, i int, t reflect.Type, keyErr error) (int, error) {
	if keyErr != nil {
		t = nil
	}
	end, err := keysOf(data, i, t)
	if keyErr != nil {
		return end, keyErr
	}
	return end, err
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\r' || data[i] == '\n') {
		i++
	}
	return i
}

// stringEnd returns the index just past the JSON string that starts at
// data[i].
func stringEnd(data []byte, i int) int {
	for i++; data[i] != '"'; i++ {
		if data[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// jsonKey unquotes the JSON string quoted.
func jsonKey(quoted []byte) (string, error) {
	if bytes.IndexByte(quoted, '\\') < 0 {
		return string(quoted[1 : len(quoted)-1]), nil
	}
	var key string
	err := json.Unmarshal(quoted, &key)
	return key, err
}

// fieldsByType caches jsonFields.
var fieldsByType sync.Map // reflect.Type → map[string]reflect.Type

// jsonFields maps the json names of the exported fields of the struct type
// t to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldsByType.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := make(map[string]reflect.Type, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct {
			// Promoted, as encoding/json promotes them, even from an
			// unexported struct.
			for name, ft := range jsonFields(f.Type) {
				if _, dup := m[name]; !dup {
					m[name] = ft
				}
			}
			continue
		}
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		if _, dup := m[name]; !dup {
			m[name] = f.Type
		}
	}
	fieldsByType.Store(t, m)
	return m
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

package receiver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// maxCallbackResponseBytes bounds the callback response bodies read.
const maxCallbackResponseBytes = 1 << 20

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
	return fmt.Sprintf("receiver: callback failed: %d %s: %s", e.StatusCode, e.Code, e.Message)
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
		return nil, fmt.Errorf("receiver: encoding callback: %w", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("receiver: callback: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Authorization", "Bearer "+token)
	hresp, err := c.hc.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("receiver: callback: %w", err)
	}
	defer hresp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(hresp.Body, maxCallbackResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("receiver: reading callback response: %w", err)
	}
	if len(data) > maxCallbackResponseBytes {
		return nil, fmt.Errorf("receiver: callback response exceeds %d bytes", maxCallbackResponseBytes)
	}
	success := hresp.StatusCode/100 == 2
	var resp CallbackResponse
	if err := json.Unmarshal(data, &resp); err != nil {
		if success {
			return nil, fmt.Errorf("receiver: decoding callback response: %w", err)
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

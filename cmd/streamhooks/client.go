package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// client calls the subscription API of the host at base.
type client struct {
	base  string
	token string
	hc    http.Client
}

// transport carries the client's requests; a test checks them on the way.
var transport = http.DefaultTransport

// apiError is an error the API answered, in its one JSON error shape.
type apiError struct {
	Status  int
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// do sends method to pattern with query, and body as JSON if not nil,
// and decodes a 2xx answer's JSON into out if not nil.
func (c *client) do(ctx context.Context, method, pattern string, query url.Values, body, out any) error {
	if c.base == "" {
		return usageError("no host: set --url or $%s", urlEnv)
	}
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(data)
	}
	u := c.base + (&url.URL{Path: pattern}).EscapedPath() + "?" + encodeQuery(query)
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var shape struct {
			Error *apiError `json:"error"`
		}
		if json.Unmarshal(data, &shape) != nil || shape.Error == nil {
			return fmt.Errorf("HTTP %d from %s: %.200s", resp.StatusCode, u, data)
		}
		shape.Error.Status = resp.StatusCode
		return shape.Error
	}
	if out == nil || len(data) == 0 {
		return nil
	}
	return json.Unmarshal(data, out)
}

// encodeQuery encodes q with the keys of empty values bare ("&dead", not
// "&dead="), as the API's flags are written.
func encodeQuery(q url.Values) string {
	var b []byte
	for _, k := range sortedKeys(q) {
		for _, v := range q[k] {
			if len(b) > 0 {
				b = append(b, '&')
			}
			b = append(b, url.QueryEscape(k)...)
			if v != "" {
				b = append(b, '=')
				b = append(b, url.QueryEscape(v)...)
			}
		}
	}
	return string(b)
}

package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/inbox"
)

// A delivery the inbox accepted survives SIGKILLs of the server at random
// moments, between its receipt and its processing too: each one is in the
// records stream once, none is a dead letter, and once the server is back
// every one is processed: the inbox subscription's cursor reaches the
// records stream's tail, and the server logged each as processed.
func TestInboxCrashRecovery(t *testing.T) {
	const secret, deliveries = "crash-secret", 40
	w := newCrashWorld(t)
	w.args = []string{"-inbox", "-inbox-secret", "github=" + secret}
	w.start()
	rng := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
	accepted := map[string]bool{}
	for i := range deliveries {
		id := fmt.Sprintf("delivery-%03d", i)
		body := fmt.Appendf(nil, `{ "action": "opened",  "n": %d }`, i)
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(body)
		req, err := http.NewRequest(http.MethodPost, w.base()+"/inbox/github", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "issues")
		req.Header.Set("X-GitHub-Delivery", id)
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		if resp, err := w.client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusAccepted {
				accepted[id] = true
			}
		}
		if rng.IntN(4) == 0 {
			w.kill() // often before the record is processed
			w.start()
		}
	}
	require.Len(t, accepted, deliveries, "a server that is up accepts every delivery")
	w.kill()
	w.start()

	records := w.readRecords("/inbox/github/records")
	seen := map[string]int{}
	for _, r := range records {
		seen[r.DeliveryID]++
	}
	for id := range accepted {
		require.Equal(t, 1, seen[id], "delivery %s recorded once", id)
	}
	require.Empty(t, w.readRecords("/inbox/github/dead"), "every signature verifies")

	tail, err := w.tail("/inbox/github/records")
	require.NoError(t, err)
	var last string
	defer func() {
		if t.Failed() {
			t.Logf("the consumer: %s (tail %s)", last, tail)
		}
	}()
	require.Eventually(t, func() bool {
		resp, err := w.client.Get(w.base() + "/**?subscription=inbox&consumer=" + url.QueryEscape(webhooks.ConsumerID("inbox", "/inbox/github/records")))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		last = string(body)
		var c struct {
			Streams []struct{ Offset string } `json:"streams"`
		}
		return resp.StatusCode == http.StatusOK && json.Unmarshal(body, &c) == nil &&
			len(c.Streams) == 1 && c.Streams[0].Offset == tail
	}, 30*time.Second, 20*time.Millisecond, "the records were not all processed")
	logs := w.logs.tail(1 << 30)
	for id := range accepted {
		require.Contains(t, logs, `msg="inbox: processed a record" provider=github delivery_id=`+id+" ", "delivery %s was never processed", id)
	}
}

// readRecords reads every record of the JSON stream at path.
func (w *crashWorld) readRecords(path string) []inbox.Record {
	w.t.Helper()
	resp, err := w.client.Get(w.base() + path + "?offset=-1")
	require.NoError(w.t, err)
	defer resp.Body.Close()
	require.Equal(w.t, http.StatusOK, resp.StatusCode)
	var out []inbox.Record
	require.NoError(w.t, json.NewDecoder(resp.Body).Decode(&out))
	return out
}

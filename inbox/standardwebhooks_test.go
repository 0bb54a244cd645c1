package inbox

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStandardWebhooksLibrary checks StandardWebhooks against the official
// Go library of the specification: what it signs, ours verifies, under
// both header sets, and it agrees with ours on what to accept.
func TestStandardWebhooksLibrary(t *testing.T) {
	lib, err := standardwebhooks.NewWebhook(standardSecret)
	require.NoError(t, err)
	ours := StandardWebhooks{Secret: standardSecret}
	at := time.Unix(1_700_000_000, 0)

	for _, body := range []string{`{"type": "a.b", "data": {"z": 1, "a": [ ]}}`, "", "\x00\xff not UTF-8 \xc3"} {
		sig, err := lib.Sign("msg_1", at, []byte(body))
		require.NoError(t, err)
		for _, prefix := range []string{"Webhook-", "Svix-"} {
			rec := record(body, at, prefix+"Id", "msg_1", prefix+"Timestamp", "1700000000", prefix+"Signature", sig)
			assert.NoError(t, ours.Verify(rec), "%s headers, body %q", prefix, body)
		}
	}

	for _, tc := range []struct {
		name      string
		id, ts    string
		signature string
		body      string
	}{
		{"known answer", standardID, standardTS, standardSig, standardBody},
		{"several versions", standardID, standardTS, "v1a,AAAA " + standardSig + " v2,x", standardBody},
		{"changed body", standardID, standardTS, standardSig, standardBody + " "},
		{"changed id", standardID + "x", standardTS, standardSig, standardBody},
		{"changed timestamp", standardID, "1614265331", standardSig, standardBody},
		{"no v1", standardID, standardTS, "v1a," + standardSig[3:], standardBody},
		{"empty id", "", standardTS, standardSig, standardBody},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			h.Set("Webhook-Id", tc.id)
			h.Set("Webhook-Timestamp", tc.ts)
			h.Set("Webhook-Signature", tc.signature)
			rec := &Record{Header: h, Body: []byte(tc.body), ReceivedAt: time.Unix(1614265330, 0)}
			// The library checks the timestamp against the wall clock, so it
			// is asked to ignore it; ours checks it against ReceivedAt.
			libErr := lib.VerifyIgnoringTimestamp([]byte(tc.body), h)
			ourErr := ours.Verify(rec)
			assert.Equal(t, libErr == nil, ourErr == nil, fmt.Sprintf("library: %v, ours: %v", libErr, ourErr))
		})
	}
}

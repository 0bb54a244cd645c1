package inbox

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const telegramToken = "bot-Secret_token-42"

func TestTelegramVerify(t *testing.T) {
	body := `{"update_id":908172,"message":{"text":"hi"}}`
	ok := Telegram{SecretToken: telegramToken}
	rec := record(body, receivedAt, telegramTokenHeader, telegramToken)
	require.NoError(t, ok.Verify(rec))

	// The token proves the sender, not the body: a changed body still
	// verifies, which is why the Scheme's doc says so.
	changed := record(`{"update_id":1}`, receivedAt, telegramTokenHeader, telegramToken)
	assert.NoError(t, ok.Verify(changed))

	for _, tc := range []struct {
		name   string
		scheme Telegram
		rec    *Record
		want   error
	}{
		{"another token", ok, record(body, receivedAt, telegramTokenHeader, telegramToken+"x"), ErrSignatureMismatch},
		{"a prefix of the token", ok, record(body, receivedAt, telegramTokenHeader, telegramToken[:5]), ErrSignatureMismatch},
		{"no header", ok, record(body, receivedAt), ErrMissingSignature},
		{"empty token configured", Telegram{}, rec, ErrUnusableSecret},
		{"token with a space configured", Telegram{SecretToken: "a b"}, record(body, receivedAt, telegramTokenHeader, "a b"), ErrUnusableSecret},
		{"token over 256 characters configured", Telegram{SecretToken: string(make([]byte, 257))}, rec, ErrUnusableSecret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.scheme.Verify(tc.rec)
			assert.ErrorIs(t, err, tc.want)
			assert.ErrorIs(t, err, ErrInvalidSignature)
		})
	}
}

func TestTelegramDeliveryID(t *testing.T) {
	for body, want := range map[string]string{
		`{"update_id":908172,"message":{}}`: "908172",
		`{"update_id":0}`:                   "0",
		`{"update_id":"908172"}`:            "", // a string is not Telegram's
		`{"update_id":1.5}`:                 "",
		`{"message":{}}`:                    "",
		`not json`:                          "",
	} {
		assert.Equal(t, want, Telegram{}.DeliveryID(http.Header{}, []byte(body)), body)
	}
}

// TestTelegramThroughTheHandler checks that a Telegram provider keeps the
// token header on the record and deduplicates by update_id.
func TestTelegramThroughTheHandler(t *testing.T) {
	app := &memAppender{}
	h, err := New(app, []Provider{{Name: "telegram", Scheme: Telegram{SecretToken: telegramToken}, Status: http.StatusOK}})
	require.NoError(t, err)
	body := `{"update_id":77,"message":{"text":"hi"}}`
	for range 2 {
		w := post(h, "/inbox/telegram", body, "Content-Type", "application/json", telegramTokenHeader, telegramToken)
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	}
	recs := app.records(t, "/inbox/telegram/records")
	require.Len(t, recs, 1, "the second delivery of update 77 is a duplicate")
	assert.Equal(t, "77", recs[0].DeliveryID)
	kept := recs[0].Header.Get(telegramTokenHeader)
	assert.NotContains(t, kept, telegramToken, "the record must not hold the token")
	assert.NoError(t, Telegram{SecretToken: telegramToken}.Verify(&recs[0]))
	assert.ErrorIs(t, Telegram{SecretToken: telegramToken + "x"}.Verify(&recs[0]), ErrSignatureMismatch)
	recs[0].Header.Set(telegramTokenHeader, "sha256:00")
	assert.ErrorIs(t, Telegram{SecretToken: telegramToken}.Verify(&recs[0]), ErrMalformedSignature)
}

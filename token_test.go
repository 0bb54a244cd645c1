package webhooks

import (
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/internal/mockclock"
)

func testTokens(t *testing.T) (*tokens, *mockclock.Clock) {
	t.Helper()
	clk := mockclock.New()
	clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return newTokens([]byte(strings.Repeat("k", MinTokenKeyLength)), time.Hour, clk), clk
}

func TestTokenCarriesConsumerEpochAndExpiry(t *testing.T) {
	tk, clk := testTokens(t)
	raw, err := tk.issue("s:%2Fa", 7, "w_1")
	require.NoError(t, err)
	claims, err := tk.verify(raw)
	require.NoError(t, err)
	require.Equal(t, "s:%2Fa", claims.Subject)
	require.Equal(t, int64(7), claims.Epoch)
	require.Equal(t, "w_1", claims.WakeID)
	require.True(t, clk.Now().Add(time.Hour).Equal(claims.ExpiresAt.Time))
}

func TestExpiredTokenIsReportedOnlyWhenValidlySigned(t *testing.T) {
	tk, clk := testTokens(t)
	raw, err := tk.issue("s:%2Fa", 1, "w_1")
	require.NoError(t, err)
	clk.Add(time.Hour + time.Second)
	claims, err := tk.verify(raw)
	require.ErrorIs(t, err, errTokenExpired)
	require.Equal(t, int64(1), claims.Epoch)

	other := newTokens([]byte(strings.Repeat("x", MinTokenKeyLength)), time.Hour, clk)
	forged, err := other.issue("s:%2Fa", 1, "w_1")
	require.NoError(t, err)
	clk.Add(2 * time.Hour)
	_, err = tk.verify(forged)
	require.ErrorIs(t, err, errTokenInvalid, "an expired token with a bad signature is invalid, not expired")
}

func TestTokenRejectsOtherAlgorithms(t *testing.T) {
	tk, clk := testTokens(t)
	claims := tokenClaims{Epoch: 1, RegisteredClaims: jwt.RegisteredClaims{
		Subject: "s:%2Fa", ExpiresAt: jwt.NewNumericDate(clk.Now().Add(time.Hour)),
	}}
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, claims).SignedString(jwt.UnsafeAllowNoneSignatureType)
	require.NoError(t, err)
	_, err = tk.verify(none)
	require.ErrorIs(t, err, errTokenInvalid)
	hs512, err := jwt.NewWithClaims(jwt.SigningMethodHS512, claims).SignedString(tk.key)
	require.NoError(t, err)
	_, err = tk.verify(hs512)
	require.ErrorIs(t, err, errTokenInvalid)
}

func TestTokenWithoutExpiryIsInvalid(t *testing.T) {
	tk, _ := testTokens(t)
	raw, err := jwt.NewWithClaims(jwt.SigningMethodHS256, tokenClaims{Epoch: 1, RegisteredClaims: jwt.RegisteredClaims{Subject: "s:%2Fa"}}).SignedString(tk.key)
	require.NoError(t, err)
	_, err = tk.verify(raw)
	require.ErrorIs(t, err, errTokenInvalid)
}

func TestTokenRenewal(t *testing.T) {
	tk, clk := testTokens(t)
	raw, err := tk.issue("s:%2Fa", 3, "w_1")
	require.NoError(t, err)
	claims, err := tk.verify(raw)
	require.NoError(t, err)
	clk.Add(44 * time.Minute)
	same, err := tk.renew(raw, claims)
	require.NoError(t, err)
	require.Equal(t, raw, same)
	clk.Add(time.Minute)
	fresh, err := tk.renew(raw, claims)
	require.NoError(t, err)
	require.NotEqual(t, raw, fresh)
	renewed, err := tk.verify(fresh)
	require.NoError(t, err)
	require.Equal(t, int64(3), renewed.Epoch)
	require.True(t, clk.Now().Add(time.Hour).Equal(renewed.ExpiresAt.Time))
}

// TestTokenVerifiesOnlyAsIssued checks that no other spelling of a token
// verifies: lax base64 ignores a segment's unused low bits, and line breaks.
func TestTokenVerifiesOnlyAsIssued(t *testing.T) {
	tk, _ := testTokens(t)
	raw, err := tk.issue("s:%2Fa", 1, "w_1")
	require.NoError(t, err)
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	// 43 characters carry a 32-byte MAC; the last one's low 2 bits are unused.
	last := strings.IndexByte(alphabet, raw[len(raw)-1])
	for _, low := range []int{0, 1, 2, 3} {
		if v := last&^3 | low; v != last {
			_, err := tk.verify(raw[:len(raw)-1] + alphabet[v:v+1])
			require.ErrorIs(t, err, errTokenInvalid, "low bits %d", low)
		}
	}
	for _, s := range []string{raw + "\r\n", raw[:len(raw)-4] + "\n" + raw[len(raw)-4:]} {
		_, err := tk.verify(s)
		require.ErrorIs(t, err, errTokenInvalid, "%q", s)
	}
}

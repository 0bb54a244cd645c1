package webhooks

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/internal/mockclock"
)

// tokenFuzzKey is fixed so that a failing input replays: seeds can hold
// tokens it signed.
var tokenFuzzKey = []byte(strings.Repeat("fuzz-key", MinTokenKeyLength/8+1))

var tokenFuzzNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const tokenFuzzTTL = time.Hour

// tokenFuzzTokens returns the fuzzed token issuer with its clock at t.
func tokenFuzzTokens(t time.Time) *tokens {
	clk := mockclock.New()
	clk.Set(t)
	return newTokens(tokenFuzzKey, tokenFuzzTTL, clk)
}

// FuzzToken checks callback tokens: an arbitrary string verifies only if it
// is, byte for byte, a token the issuer would have made for its claims; a
// token issued for (consumer, epoch) carries exactly those; and no single
// byte change of a token verifies, expired or not.
func FuzzToken(f *testing.F) {
	tk := tokenFuzzTokens(tokenFuzzNow)
	issued, err := tk.issue("sub:%2Fagents%2Ftask-1", 1, "w_1")
	require.NoError(f, err)
	f.Add(issued, "sub:%2Fagents%2Ftask-1", int64(1), uint16(len(issued)-1), byte(1))
	f.Add("", "", int64(0), uint16(0), byte(0))
	f.Add("a.b.c", "s:%2F", int64(-1), uint16(2), byte(0x20))
	f.Add("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJlcG9jaCI6MSwic3ViIjoicyJ9.", "s:%2Fa", int64(1<<62), uint16(7), byte(0x80))
	f.Add(issued+"=", "x:%2F%C3%A9", int64(-1<<63), uint16(0), byte(0xff))
	f.Add(strings.ReplaceAll(issued, ".", ".."), "\xff:/a", int64(3), uint16(36), byte(1))
	f.Fuzz(func(t *testing.T, raw, consumer string, epoch int64, pos uint16, xor byte) {
		if claims, err := tk.verify(raw); err == nil || err == errTokenExpired {
			require.NotNil(t, claims.IssuedAt, "verified a token without iat: %q", raw)
			again, err := tokenFuzzTokens(claims.IssuedAt.Time).issue(claims.Subject, claims.Epoch, claims.WakeID)
			require.NoError(t, err)
			require.Equal(t, again, raw, "verified a token the issuer did not make")
		} else {
			require.ErrorIs(t, err, errTokenInvalid)
			require.Nil(t, claims)
		}

		// Consumer IDs are ASCII; JSON would replace invalid UTF-8.
		consumer = strings.ToValidUTF8(consumer, "\uFFFD")
		tok, err := tk.issue(consumer, epoch, "w_1")
		require.NoError(t, err)
		claims, err := tk.verify(tok)
		require.NoError(t, err)
		require.Equal(t, consumer, claims.Subject)
		require.Equal(t, epoch, claims.Epoch)
		require.True(t, tokenFuzzNow.Add(tokenFuzzTTL).Equal(claims.ExpiresAt.Time))

		later := tokenFuzzTokens(tokenFuzzNow.Add(tokenFuzzTTL + time.Second))
		claims, err = later.verify(tok)
		require.ErrorIs(t, err, errTokenExpired)
		require.Equal(t, consumer, claims.Subject)
		require.Equal(t, epoch, claims.Epoch)

		// Every position, so that one input covers each segment's last
		// character, whose low bits base64 may ignore.
		if xor == 0 {
			xor = 1
		}
		for i := range len(tok) {
			b := []byte(tok)
			b[i] ^= xor
			_, err := tk.verify(string(b))
			require.ErrorIs(t, err, errTokenInvalid, "byte %d ^ %#x of %q verified: %q", i, xor, tok, b)
		}
		b := []byte(tok)
		b[int(pos)%len(b)] ^= xor
		_, err = later.verify(string(b))
		require.ErrorIs(t, err, errTokenInvalid, "byte %d ^ %#x of an expired token passed as expired", int(pos)%len(b), xor)
	})
}

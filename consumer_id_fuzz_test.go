package webhooks

import (
	"net/url"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// FuzzConsumerID checks consumer ID encoding: ConsumerID and ParseConsumerID
// round-trip for every valid subscription ID and stream path; the encoded ID
// survives a trip through a callback URL; and whatever ParseConsumerID
// accepts re-encodes to a canonical ID that parses to the same parts.
func FuzzConsumerID(f *testing.F) {
	for _, seed := range []struct{ sub, path, raw string }{
		{"my-sub", "/agents/task-123", "my-sub:%2Fagents%2Ftask-123"},
		{"s", "/", "s:%2f"},
		{"s.v1_x-Y", "/a b/c%20d/é", "s:/a/b"},
		{"s", "/a:b?c#d;e,f+g&h=i@j$k", "s:%2Fa:b%3Fc%23d%3Be%2Cf+g&h=i@j$k"},
		{"s", "/%2F/%25/%", "s:%2F%"},
		{"s", "/\x00\xff\n", "s:%2F%zz"},
		{"s", "/callback/x", "s:%2Fcallback%2Fx"},
		{"s", "/a", "callback/s:%2Fa"},
		{"s", "relative", "s:relative"},
		{"", "/a", ":%2Fa"},
		{"a:b", "/a", "a:b:%2Fa"},
		{"s/t", "/a", "no colon"},
		{strings.Repeat("s", MaxSubscriptionIDLength), "/a", strings.Repeat("s", MaxSubscriptionIDLength+1) + ":%2Fa"},
	} {
		f.Add(seed.sub, seed.path, seed.raw)
	}
	f.Fuzz(func(t *testing.T, sub, path, raw string) {
		// Only valid subscription IDs reach ConsumerID: one with a ':'
		// makes an ID that parses as another.
		if ValidateSubscriptionID(sub) == nil {
			id := ConsumerID(sub, path)
			gotSub, gotPath, err := ParseConsumerID(id)
			valid := strings.HasPrefix(path, "/") && len(path) <= MaxStreamPathLength && !strings.ContainsFunc(path, unicode.IsControl)
			require.Equal(t, valid, err == nil, "ParseConsumerID(%q): %v", id, err)
			if valid {
				require.Equal(t, sub, gotSub)
				require.Equal(t, path, gotPath)
				consumerIDFuzzURL(t, id)
			}
		}

		// The handler takes the id after the last "/callback/"; when that
		// is raw, it must read raw as ParseConsumerID does.
		full := "/hooks" + callbackSegment + raw
		whole := strings.LastIndex(full, callbackSegment) == len("/hooks")
		gotSub, gotPath, err := ParseConsumerID(raw)
		if err != nil {
			require.Empty(t, gotSub)
			require.Empty(t, gotPath)
			if whole {
				_, err := callbackConsumerID(full)
				require.Error(t, err, "the callback handler accepts %q", raw)
			}
			return
		}
		require.NoError(t, ValidateSubscriptionID(gotSub))
		require.True(t, strings.HasPrefix(gotPath, "/"))
		canon := ConsumerID(gotSub, gotPath)
		again, againPath, err := ParseConsumerID(canon)
		require.NoError(t, err)
		require.Equal(t, gotSub, again)
		require.Equal(t, gotPath, againPath)
		require.Equal(t, canon, ConsumerID(again, againPath), "decode→encode is not canonical")
		consumerIDFuzzURL(t, canon)
		if whole {
			got, err := callbackConsumerID(full)
			require.NoError(t, err)
			require.Equal(t, canon, got, "the callback handler reads %q as another consumer", raw)
		}
	})
}

// consumerIDFuzzURL checks that a canonical id is one path segment of a
// callback URL and that the callback handler reads it back unchanged.
func consumerIDFuzzURL(t *testing.T, id string) {
	t.Helper()
	require.NotContains(t, id, "/")
	u, err := url.Parse("http://streams.test/v1" + callbackSegment + id)
	require.NoError(t, err, "id %q", id)
	require.Empty(t, u.RawQuery, "id %q", id)
	require.Empty(t, u.Fragment, "id %q", id)
	got, err := callbackConsumerID(u.EscapedPath())
	require.NoError(t, err)
	require.Equal(t, id, got)
}

package webhooks

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// covers holds only when every path the inner pattern matches, the outer
// one matches too.
func TestPatternCovers(t *testing.T) {
	for _, tc := range []struct {
		outer, inner string
		want         bool
	}{
		{"/tenants/a/**", "/tenants/a/**", true},
		{"/tenants/a/**", "/tenants/a", true},
		{"/tenants/a/**", "/tenants/a/x/*/y/**", true},
		{"/tenants/a/**", "/tenants/*/x", false},
		{"/tenants/a/**", "/tenants/**", false},
		{"/tenants/a/**", "/**", false},
		{"/tenants/a/**", "/tenants/ab/x", false},
		{"/tenants/a/*", "/tenants/a/x", true},
		{"/tenants/a/*", "/tenants/a/*", true},
		{"/tenants/a/*", "/tenants/a/**", false},
		{"/tenants/a/*", "/tenants/a/x/y", false},
		{"/tenants/*/public/**", "/tenants/a/public/x/**", true},
		{"/tenants/*/public/**", "/tenants/a/private/x", false},
		{"/**/logs", "/a/*/logs", true},
		{"/**/logs", "/a/**/logs", true},
		{"/**/logs", "/a/logs/x", false},
		{"/**", "/**", true},
		{"/a/**/b/**", "/a/x/b/y/b", true},
	} {
		outer, err := ParsePattern(tc.outer)
		require.NoError(t, err)
		inner, err := ParsePattern(tc.inner)
		require.NoError(t, err)
		require.Equal(t, tc.want, outer.covers(inner), "%s covers %s", tc.outer, tc.inner)
		if tc.want {
			require.True(t, outer.Match(tc.inner), "a covered pattern, read as a path, matches")
		}
	}
}

package inbox

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRoutingMetadata: the path below the provider's segment and the query
// are kept on the record, and the provider is the leftmost segment naming
// one, so that today's URLs, under any mount, still reach theirs.
func TestRoutingMetadata(t *testing.T) {
	for _, c := range []struct{ url, provider, path, query string }{
		{"/inbox/github/org/acme?x=1", "github", "/org/acme", "x=1"},
		{"/inbox/github", "github", "", ""},
		{"/inbox/github/", "github", "", ""},
		{"/hooks/inbox/github?a=b&a=c", "github", "", "a=b&a=c"},
		{"/github/users/42", "github", "/users/42", ""},
		{"/inbox/github/stripe", "github", "/stripe", ""},
		{"/inbox/stripe/github/x", "stripe", "/github/x", ""},
	} {
		t.Run(c.url, func(t *testing.T) {
			h, app, _ := newTestHandler(t)
			w := post(h, c.url, `{}`)
			require.Less(t, w.Code, 300, w.Body.String())
			recs := app.records(t, "/inbox/"+c.provider+"/records")
			require.Len(t, recs, 1)
			assert.Equal(t, c.provider, recs[0].Provider)
			assert.Equal(t, c.path, recs[0].Path)
			assert.Equal(t, c.query, recs[0].Query)
		})
	}
	h, _, _ := newTestHandler(t)
	assert.Equal(t, http.StatusNotFound, post(h, "/inbox/gitlab/org", `{}`).Code)
	assert.Equal(t, http.StatusNotFound, post(h, "/", `{}`).Code)
}

package webhooks

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/glob"
	"github.com/stretchr/testify/require"
)

// filterFuzzMaxValue bounds the fuzzed field values. An event can be
// larger, but a few KiB already shows a blow-up.
const filterFuzzMaxValue = 4 << 10

// filterFuzzBudget is how long one compile and match may take. A linear
// match takes well under a millisecond; gobwas's backtracking took a core
// for good on `*a*a*a*a*a*a*a*a*a*a*c*` and an 81-byte value.
const filterFuzzBudget = 2 * time.Second

// FuzzEventFilter compiles a filter pattern and matches one value with it
// in bounded time, and, where gobwas's backtracking is cheap (few stars,
// short values), checks that it matches what gobwas matches.
func FuzzEventFilter(f *testing.F) {
	for _, seed := range []struct{ pattern, value string }{
		{"order.*", "order.created"},
		{"refund.**", "refund.a.b"},
		{"*a*a*a*a*a*a*a*a*a*a*c*", strings.Repeat("a", 81)},
		{"[!a]?", ".b"},
		{"[a-c]{x,y.*}", "by.z"},
		{"[*a-c]{x,y.*}", "by.z"}, // a list, '-' among its characters: no match
		{"[!a-c]y", "by"},
		{`a\*b`, "a*b"},
		{"{a,{b,c}}", "c"},
		{"é?*", "éü"},
		{"x{,a}", "x"},
		{"[\\]]", "]"},
	} {
		f.Add(seed.pattern, seed.value)
	}
	f.Fuzz(func(t *testing.T, pattern, value string) {
		if len(value) > filterFuzzMaxValue {
			value = value[:filterFuzzMaxValue]
		}
		event, err := json.Marshal(map[string]string{"type": value})
		require.NoError(t, err)
		var decoded map[string]string
		require.NoError(t, json.Unmarshal(event, &decoded))
		value = decoded["type"] // valid UTF-8, as every decoded value is

		start := time.Now()
		flt, err := compileFilter(&EventFilter{Field: "type", Patterns: []string{pattern}})
		if err != nil {
			return
		}
		got := flt.match(event)
		require.Less(t, time.Since(start), filterFuzzBudget, "pattern %q, value of %d bytes", pattern, len(value))

		if strings.Count(pattern, "*") <= 3 && len(value) <= 64 {
			g, err := glob.Compile(pattern, '.')
			require.NoError(t, err, "compileFilter accepted what gobwas refuses")
			require.Equal(t, g.Match(value), got, "pattern %q, value %q: gobwas and the filter disagree", pattern, value)
		}
	})
}

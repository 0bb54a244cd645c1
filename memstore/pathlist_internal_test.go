package memstore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// A pathList holds what a sorted set does, through chunk splits and
// emptied chunks, and pages it from any path.
func TestPathListIsASortedSet(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var l pathList
	want := map[string]bool{}
	for i := range 20_000 {
		p := fmt.Sprintf("p/%05d", r.IntN(3*maxChunk))
		if i%3 == 2 {
			l.remove(p)
			delete(want, p)
		} else {
			l.insert(p)
			want[p] = true
		}
	}
	sorted := make([]string, 0, len(want))
	for p := range want {
		sorted = append(sorted, p)
	}
	slices.Sort(sorted)
	require.Equal(t, len(sorted), l.len())
	require.Equal(t, sorted, slices.Collect(l.after("")))
	from := sorted[len(sorted)/2]
	require.Equal(t, sorted[len(sorted)/2+1:], slices.Collect(l.after(from)))
	require.Greater(t, len(l.chunks), 1, "the list split into chunks")
	for i, ch := range l.chunks {
		require.Equal(t, ch[len(ch)-1], l.lasts[i], "chunk %d's last path", i)
	}
}

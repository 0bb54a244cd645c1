package memstore

import (
	"iter"
	"slices"
	"sort"
)

// pathList is a set of paths in order, in sorted chunks of at most
// maxChunk, as idList keeps consumers: an insert or a removal moves at
// most a chunk, however many links a subscription has.
type pathList struct {
	chunks [][]string // none empty
	// lasts are the chunks' last paths, side by side, so that finding a
	// chunk reads one array and no chunk.
	lasts []string
	n     int
}

func (l *pathList) len() int { return l.n }

// chunk returns the index of the chunk that holds path or would. l is not
// empty.
func (l *pathList) chunk(path string) int {
	i, _ := slices.BinarySearch(l.lasts, path)
	return min(i, len(l.chunks)-1)
}

func (l *pathList) insert(path string) {
	if len(l.chunks) == 0 {
		l.chunks, l.lasts = [][]string{{path}}, []string{path}
		l.n = 1
		return
	}
	i := l.chunk(path)
	ch := l.chunks[i]
	j, found := slices.BinarySearch(ch, path)
	if found {
		return
	}
	l.n++
	ch = slices.Insert(ch, j, path)
	if len(ch) <= maxChunk {
		l.chunks[i], l.lasts[i] = ch, ch[len(ch)-1]
		return
	}
	half := len(ch) / 2
	right := slices.Clone(ch[half:])
	l.chunks[i], l.lasts[i] = slices.Clip(ch[:half]), ch[half-1]
	l.chunks = slices.Insert(l.chunks, i+1, right)
	l.lasts = slices.Insert(l.lasts, i+1, right[len(right)-1])
}

func (l *pathList) remove(path string) {
	if len(l.chunks) == 0 {
		return
	}
	i := l.chunk(path)
	ch := l.chunks[i]
	j, found := slices.BinarySearch(ch, path)
	if !found {
		return
	}
	l.n--
	if ch = slices.Delete(ch, j, j+1); len(ch) == 0 {
		l.chunks = slices.Delete(l.chunks, i, i+1)
		l.lasts = slices.Delete(l.lasts, i, i+1)
	} else {
		l.chunks[i], l.lasts[i] = ch, ch[len(ch)-1]
	}
}

// after yields the paths that sort after path, in order.
func (l *pathList) after(path string) iter.Seq[string] {
	return func(yield func(string) bool) {
		i := sort.Search(len(l.lasts), func(i int) bool { return l.lasts[i] > path })
		for ; i < len(l.chunks); i++ {
			ch := l.chunks[i]
			j := sort.Search(len(ch), func(j int) bool { return ch[j] > path })
			for _, p := range ch[j:] {
				if !yield(p) {
					return
				}
			}
		}
	}
}

package memstore

import (
	"iter"
	"slices"
	"sort"
)

// maxChunk bounds the entries of one chunk of an idList.
const maxChunk = 256

// idList is a set of entries ordered by consumer ID, in sorted chunks of
// at most maxChunk entries: an insert or a removal moves at most maxChunk
// pointers, and a seek is two binary searches, however many consumers a
// subscription has. A plain sorted slice would move half of them.
type idList struct {
	chunks [][]*entry // none empty
}

// chunk returns the index of the chunk that holds id or would: the first
// whose last ID is not below id, or else the last. l is not empty.
func (l *idList) chunk(id string) int {
	i := sort.Search(len(l.chunks), func(i int) bool {
		ch := l.chunks[i]
		return ch[len(ch)-1].id >= id
	})
	return min(i, len(l.chunks)-1)
}

func (l *idList) insert(e *entry) {
	if len(l.chunks) == 0 {
		l.chunks = [][]*entry{{e}}
		return
	}
	i := l.chunk(e.id)
	ch := l.chunks[i]
	j, _ := slices.BinarySearchFunc(ch, e.id, cmpID)
	ch = slices.Insert(ch, j, e)
	if len(ch) <= maxChunk {
		l.chunks[i] = ch
		return
	}
	half := len(ch) / 2
	right := slices.Clone(ch[half:])
	clear(ch[half:]) // the left half's array must not keep entries alive
	l.chunks[i] = ch[:half]
	l.chunks = slices.Insert(l.chunks, i+1, right)
}

func (l *idList) remove(e *entry) {
	if len(l.chunks) == 0 {
		return
	}
	i := l.chunk(e.id)
	ch := l.chunks[i]
	j, found := slices.BinarySearchFunc(ch, e.id, cmpID)
	if !found {
		return
	}
	if ch = slices.Delete(ch, j, j+1); len(ch) == 0 {
		l.chunks = slices.Delete(l.chunks, i, i+1)
	} else {
		l.chunks[i] = ch
	}
}

// after yields the entries whose ID sorts after id, in order.
func (l *idList) after(id string) iter.Seq[*entry] {
	return func(yield func(*entry) bool) {
		i := sort.Search(len(l.chunks), func(i int) bool {
			ch := l.chunks[i]
			return ch[len(ch)-1].id > id
		})
		for ; i < len(l.chunks); i++ {
			ch := l.chunks[i]
			j := sort.Search(len(ch), func(j int) bool { return ch[j].id > id })
			for _, e := range ch[j:] {
				if !yield(e) {
					return
				}
			}
		}
	}
}

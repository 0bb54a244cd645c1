package webhooks

import (
	"math/bits"
)

// The stream sweep's marks: what a sweep keeps of the streams it listed,
// for the next one to find those whose tail moved. A stream's mark hashes
// its path and tail, and the marks are kept only as sums, so that they
// take a bounded memory however many streams there are: a sum for each
// pattern listed (they grow with subscriptions), and one for each of a
// number of buckets of streams by path hash, about one per
// streamsPerBucket streams, at most maxSweepBuckets (512 KiB). A stream
// moved if the sums of its pattern and of its bucket both changed; the
// other streams of a changed bucket listed by a changed pattern are looked
// at too, which costs a Store read each and changes nothing. A sorted
// slice of every stream's mark found exactly the streams that moved, at 8
// bytes a stream: 8 MB, the most of an engine's memory, with a million.
//
// A sum of 64-bit hashes hides a change only if the change happens to add
// up to zero: about one chance in 2^64 for each.
const (
	streamsPerBucket = 16
	minSweepBuckets  = 1 << 6
	maxSweepBuckets  = 1 << 16
)

// sweepMarks are one sweep's marks.
type sweepMarks struct {
	// patterns are the sums of each listed pattern's streams' marks.
	patterns map[string]uint64
	// buckets are the sums of the marks of the streams whose path hash
	// falls in each, a stream counted once per pattern that listed it.
	// Their number is a power of two; while a sweep adds marks, it is
	// maxSweepBuckets.
	buckets []uint64
	listed  int
}

func newSweepMarks() *sweepMarks {
	return &sweepMarks{patterns: make(map[string]uint64), buckets: make([]uint64, maxSweepBuckets)}
}

// add adds the mark of a stream, whose path hashes to h, listed by
// pattern.
func (m *sweepMarks) add(pattern string, h, mark uint64) {
	m.patterns[pattern] += mark
	m.buckets[h&(maxSweepBuckets-1)] += mark
	m.listed++
}

// list records that pattern was listed, before its streams are added:
// a pattern that lists none has a sum too.
func (m *sweepMarks) list(pattern string) {
	if _, ok := m.patterns[pattern]; !ok {
		m.patterns[pattern] = 0
	}
}

// done returns m with its buckets folded to about one per
// streamsPerBucket streams listed.
func (m *sweepMarks) done() *sweepMarks {
	n := max(minSweepBuckets, min(maxSweepBuckets, 1<<bits.Len(uint(m.listed/streamsPerBucket))))
	m.buckets = foldBuckets(m.buckets, n)
	return m
}

// foldBuckets returns buckets folded into n, a power of two no greater
// than their number: a path hash's bucket among n is its bucket's
// index modulo n, so the sums of those buckets make its sum.
func foldBuckets(buckets []uint64, n int) []uint64 {
	if n >= len(buckets) {
		return buckets
	}
	out := make([]uint64, n)
	for i, v := range buckets {
		out[i&(n-1)] += v
	}
	return out
}

// bucketChanges compares the buckets of prev and next, in the fewer
// buckets of the two, and reports for a path hash whether its bucket's sum
// changed. With no previous marks, every bucket changed.
func bucketChanges(prev, next *sweepMarks) func(h uint64) bool {
	if prev == nil {
		return func(uint64) bool { return true }
	}
	n := min(len(prev.buckets), len(next.buckets))
	a, b := foldBuckets(prev.buckets, n), foldBuckets(next.buckets, n)
	return func(h uint64) bool {
		i := h & uint64(n-1)
		return a[i] != b[i]
	}
}

// forget makes the next sweep look again at a stream listed by pattern
// whose path hashes to h: it changes the sums it will compare with.
// Adding one to a sum cannot make it equal to the next sweep's unless
// that stream moves by exactly minus one, however many are forgotten.
func (m *sweepMarks) forget(pattern string, h uint64) {
	m.patterns[pattern]++
	m.buckets[h&uint64(len(m.buckets)-1)]++
}

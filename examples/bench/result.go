package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// result is one measured figure: a BENCH line for machines and a table row
// for people.
type result struct {
	name   string
	store  string
	fields []field // the BENCH line after name and store, in order
	label  string  // the table's first column
	value  string  // the headline figure
	goal   string  // the goal, or "" if the figure has none
	met    bool
}

type field struct{ key, value string }

func (r *result) add(key string, value any) {
	r.fields = append(r.fields, field{key, fmt.Sprint(value)})
}

func (r *result) benchLine() string {
	var b strings.Builder
	fmt.Fprintf(&b, "BENCH name=%s store=%s", r.name, r.store)
	for _, f := range r.fields {
		fmt.Fprintf(&b, " %s=%s", f.key, f.value)
	}
	return b.String()
}

// writeTable writes one row per result, the rows of one label, a figure at
// one size on each Store, next to each other in the order they first came;
// a row under the same label leaves it blank.
func writeTable(out io.Writer, results []result) {
	first := map[string]int{}
	for i, r := range results {
		if _, ok := first[r.label]; !ok {
			first[r.label] = i
		}
	}
	results = slices.Clone(results)
	slices.SortStableFunc(results, func(a, b result) int { return first[a.label] - first[b.label] })
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FIGURE\tSTORE\tMEASURED\tGOAL\tMET")
	for i, r := range results {
		label := r.label
		if i > 0 && results[i-1].label == label {
			label = ""
		}
		met := ""
		if r.goal != "" {
			met = "no"
			if r.met {
				met = "yes"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", label, r.store, r.value, r.goal, met)
	}
	_ = tw.Flush()
}

// latencies summarizes a sample of durations.
type latencies struct {
	n             int
	p50, p99, max time.Duration
}

func summarize(ds []time.Duration) latencies {
	if len(ds) == 0 {
		return latencies{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	// The nearest-rank percentile: the smallest value with at least p% of
	// the sample at or below it.
	rank := func(p int) time.Duration { return s[(len(s)*p+99)/100-1] }
	return latencies{n: len(s), p50: rank(50), p99: rank(99), max: s[len(s)-1]}
}

// addTo writes the summary as prefix+"p50_us" and so on.
func (l latencies) addTo(r *result, prefix string) {
	r.add(prefix+"p50_us", us(l.p50))
	r.add(prefix+"p99_us", us(l.p99))
	r.add(prefix+"max_us", us(l.max))
}

func (l latencies) String() string {
	return fmt.Sprintf("p50 %v, p99 %v, max %v", round(l.p50), round(l.p99), round(l.max))
}

func us(d time.Duration) int64 { return d.Microseconds() }

// round keeps three significant digits, enough for a table.
func round(d time.Duration) time.Duration {
	for unit := time.Nanosecond; unit < time.Hour; unit *= 10 {
		if d < 1000*unit {
			return d.Round(unit)
		}
	}
	return d
}

// bytesPer formats a size per item.
func bytesPer(total int64, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(total) / float64(n)
}

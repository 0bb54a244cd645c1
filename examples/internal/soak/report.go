package soak

import (
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTable writes the report as a plain-text table of figures.
func (r *Report) WriteTable(w io.Writer) error {
	c := r.Config
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) }

	p("consumers\t%d\t(%s)", c.Consumers, counts(r.Kinds))
	p("load\t%v at %.0f appends/s, %d appenders", c.Load, c.AppendRate, c.Appenders)
	p("engine\twaking %v, liveness %v, request %v, failure GC %v, backoff %v..%v, %d deliveries in flight",
		c.WakingTimeout, c.LivenessTimeout, c.RequestTimeout, c.FailureGCAfter, c.BackoffBase, c.BackoffMax, c.MaxConcurrentDeliveries)
	p("machine\t%d CPUs, load average %s when the load began, %s when it ended", runtime.NumCPU(), r.LoadAverage[0], r.LoadAverage[1])
	p("phases\tsetup %v, load %v, drain %v, teardown %v",
		round(r.Setup), round(r.Loaded), round(r.Drained), round(r.Teardown))
	p("")
	p("resource\tbefore\tpeak\tafter\tafter may exceed before by")
	p("goroutines\t%d\t%d\t%d\t%d", r.Before.Goroutines, r.Peak.Goroutines, r.After.Goroutines, c.GoroutineSlack)
	p("live heap MiB\t%s\t%s\t%s\t%s", mib(r.Before.HeapBytes), mib(r.Peak.HeapBytes), mib(r.After.HeapBytes), mib(c.heapAllowance(r.Peak.Goroutines)))
	p("TCP established\t%d\t%d\t%d\t0", r.Before.Conns, r.Peak.Conns, r.After.Conns)
	p("open fds\t%d\t%d\t%d\t0", r.Before.FDs, r.Peak.FDs, r.After.FDs)
	p("")
	p("appends\t%d made, %d dropped by the pacer", r.Appends, r.Dropped)
	p("append latency\tp50 %v, p99 %v, max %v", r.AppendLatency[0].Round(time.Microsecond),
		r.AppendLatency[1].Round(time.Microsecond), r.AppendLatency[2].Round(time.Microsecond))
	p("wakes\t%d", r.Wakes)
	p("deliveries\t%s", counts64(r.Deliveries))
	p("webhooks received\t%s", counts64(r.Requests))
	p("callbacks\t%s", counts64(r.Callbacks))
	p("acks answered 200\t%d", r.Acks)
	p("wakes abandoned\t%s", counts64(r.AgentFailures))
	p("dead letters (GC)\t%s", counts(r.Collected))
	p("conns accepted\t%d by receivers, %d by the stream server", r.ConnsToReceivers, r.ConnsToStreamServer)
	p("max overdue\t%v", round(r.MaxOverdue))
	p("")
	if r.OK() {
		p("result\tPASS: no violations; resources back to the baseline")
	} else {
		p("result\tFAIL: %d violations", len(r.Violations))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, v := range r.Violations {
		if _, err := fmt.Fprintf(w, "  - %s\n", v); err != nil {
			return err
		}
	}
	if r.Goroutines != "" {
		_, err := fmt.Fprintf(w, "\ngoroutines at the failure:\n%s", r.Goroutines)
		return err
	}
	return nil
}

func counts(m map[string]int) string {
	m64 := make(map[string]int64, len(m))
	for k, v := range m {
		m64[k] = int64(v)
	}
	return counts64(m64)
}

// counts64 formats a map as "k1 v1, k2 v2" in key order.
func counts64(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func round(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }

package soak

import (
	"bufio"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
)

// Sample is the process's resource use at one moment.
type Sample struct {
	Goroutines int
	// HeapBytes is the live heap: what the last garbage collection found
	// reachable.
	HeapBytes uint64
	// Conns counts the process's established TCP connections; a loopback
	// connection whose both ends are in the process counts twice. It is -1
	// where /proc is unavailable.
	Conns int
	// FDs counts open file descriptors, or -1 where /proc is unavailable.
	FDs int
}

// liveHeapMetric is the live heap as the last GC cycle marked it; reading
// it does not force a collection, which would disturb the load.
const liveHeapMetric = "/gc/heap/live:bytes"

// takeSample measures the process now, with the live heap as of the last
// garbage collection.
func takeSample() Sample {
	m := []metrics.Sample{{Name: liveHeapMetric}}
	metrics.Read(m)
	s := Sample{Goroutines: runtime.NumGoroutine(), Conns: -1, FDs: -1}
	if m[0].Value.Kind() == metrics.KindUint64 {
		s.HeapBytes = m[0].Value.Uint64()
	}
	sockets, fds, err := socketInodes()
	if err != nil {
		return s
	}
	s.FDs = fds
	if n, err := establishedConns(sockets); err == nil {
		s.Conns = n
	}
	return s
}

// takeSettledSample runs full garbage collections and then measures, so
// that the heap figure is exact. It costs milliseconds on a large heap.
func takeSettledSample() Sample {
	// The second collection frees what sync.Pools kept through the first.
	runtime.GC()
	runtime.GC()
	return takeSample()
}

// max returns the larger of each figure of s and o.
func (s Sample) max(o Sample) Sample {
	return Sample{
		Goroutines: max(s.Goroutines, o.Goroutines),
		HeapBytes:  max(s.HeapBytes, o.HeapBytes),
		Conns:      max(s.Conns, o.Conns),
		FDs:        max(s.FDs, o.FDs),
	}
}

// socketInodes returns the inodes of the process's open sockets and the
// number of its open file descriptors.
func socketInodes() (map[string]bool, int, error) {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, 0, err
	}
	inodes := make(map[string]bool)
	for _, e := range entries {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // closed since ReadDir
		}
		if ino, ok := strings.CutPrefix(target, "socket:["); ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	// ReadDir itself held one descriptor, now closed.
	return inodes, len(entries) - 1, nil
}

// establishedConns counts the TCP sockets among inodes that are in the
// ESTABLISHED state, from the kernel's tables of the process's network
// namespace.
func establishedConns(inodes map[string]bool) (int, error) {
	n := 0
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		c, err := countEstablished(table, inodes)
		if err != nil {
			if os.IsNotExist(err) {
				continue // no IPv6
			}
			return 0, err
		}
		n += c
	}
	return n, nil
}

// tcpEstablished is the ESTABLISHED state as /proc/net/tcp writes it.
const tcpEstablished = "01"

func countEstablished(table string, inodes map[string]bool) (int, error) {
	f, err := os.Open(table)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	n := 0
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
		fields := strings.Fields(sc.Text())
		if len(fields) > 9 && fields[3] == tcpEstablished && inodes[fields[9]] {
			n++
		}
	}
	return n, sc.Err()
}

// mib formats bytes in MiB.
func mib(b uint64) string {
	return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64)
}

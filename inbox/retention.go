package inbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	webhooks "github.com/streamhooks/webhooks"
)

// Retentions of seed 003, the defaults of Retention.
const (
	DefaultDoneRetention = 7 * 24 * time.Hour
	DefaultDeadRetention = 30 * 24 * time.Hour
)

// partitionLayout names a partition: the UTC day its events were appended.
const partitionLayout = "2006-01-02"

// day is a partition's span.
const day = 24 * time.Hour

// partition is the partition of stream for time t.
func partition(stream string, t time.Time) string {
	return stream + "/" + t.UTC().Format(partitionLayout)
}

// partitionDay returns the day of path if it is a partition of stream.
func partitionDay(stream, path string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(path, stream+"/")
	if !ok || len(rest) != len(partitionLayout) {
		return time.Time{}, false
	}
	d, err := time.Parse(partitionLayout, rest)
	return d, err == nil
}

// holds reports whether path is stream or one of its partitions.
func holds(stream, path string) bool {
	if path == stream {
		return true
	}
	_, ok := partitionDay(stream, path)
	return ok
}

// Streams is what an Admin and a Sweep need of the host's streams: to read
// them and to find a stream's partitions.
type Streams interface {
	webhooks.EventReader
	MatchStreams(ctx context.Context, pattern *webhooks.Pattern) ([]webhooks.StreamInfo, error)
}

// Deleter deletes the stream at path, durably; a stream already gone is
// not an error.
type Deleter interface {
	Delete(ctx context.Context, path string) error
}

// Retention is how long a Sweep keeps the partitions of processed records
// and of dead letters, counted from the end of their day.
type Retention struct {
	// Done is for a partition of records, once every record in it is
	// processed; DefaultDoneRetention if zero.
	Done time.Duration
	// Dead is for a partition of dead letters; DefaultDeadRetention if
	// zero.
	Dead time.Duration
}

// parts returns the paths of stream and its partitions that exist, stream
// first if it does, then the partitions by day.
func parts(ctx context.Context, streams Streams, stream string) ([]webhooks.StreamInfo, error) {
	pattern, err := webhooks.ParsePattern(stream + "/*")
	if err != nil {
		return nil, fmt.Errorf("inbox: the stream %s has no partitions: %w", stream, err)
	}
	found, err := streams.MatchStreams(ctx, pattern)
	if err != nil {
		return nil, err
	}
	found = slices.DeleteFunc(found, func(s webhooks.StreamInfo) bool { _, ok := partitionDay(stream, s.Path); return !ok })
	slices.SortFunc(found, func(a, b webhooks.StreamInfo) int { return strings.Compare(a.Path, b.Path) })
	exact, err := webhooks.ParsePattern(stream)
	if err != nil {
		return nil, err
	}
	legacy, err := streams.MatchStreams(ctx, exact)
	if err != nil {
		return nil, err
	}
	return append(legacy, found...), nil
}

// Sweep deletes the partitions (WithDailyPartitions) of the providers'
// streams that retention lets go: a partition of records once every
// record in it is processed, by cursor, and its day ended retention.Done
// ago; a partition of dead letters once its day ended retention.Dead ago.
// A partition with a record the cursor has not passed stays, whatever its
// age, and so does an unpartitioned stream, which is append-only. It
// returns the paths deleted; the host runs it, e.g. hourly.
func (p *Processor) Sweep(ctx context.Context, streams Streams, cursor Cursor, del Deleter, retention Retention) ([]string, error) {
	if retention.Done <= 0 {
		retention.Done = DefaultDoneRetention
	}
	if retention.Dead <= 0 {
		retention.Dead = DefaultDeadRetention
	}
	now := p.clock.Now()
	seen := make(map[string]bool)
	var deleted []string
	var errs []error
	sweep := func(stream string, keep time.Duration, processed func(path string) (bool, error)) {
		if seen[stream] {
			return // shared by providers
		}
		seen[stream] = true
		found, err := parts(ctx, streams, stream)
		if err != nil {
			errs = append(errs, err)
			return
		}
		for _, s := range found {
			d, ok := partitionDay(stream, s.Path)
			if !ok || now.Before(d.Add(day+keep)) {
				continue
			}
			if done, err := processed(s.Path); err != nil || !done {
				errs = append(errs, err)
				continue
			}
			if err := del.Delete(ctx, s.Path); err != nil {
				errs = append(errs, fmt.Errorf("inbox: deleting %s: %w", s.Path, err))
				continue
			}
			deleted = append(deleted, s.Path)
		}
	}
	names := make([]string, 0, len(p.providers))
	for name := range p.providers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		prov := p.providers[name]
		sweep(prov.stream, retention.Done, func(path string) (bool, error) {
			cur, err := cursor(ctx, path)
			if err != nil {
				return false, err
			}
			b, err := streams.ReadEvents(ctx, path, cur, webhooks.ReadLimit{MaxEvents: 1})
			return err == nil && len(b.Events) == 0, err
		})
		sweep(prov.dead, retention.Dead, func(string) (bool, error) { return true, nil })
	}
	for _, path := range deleted {
		p.log.InfoContext(ctx, "inbox: deleted a partition past its retention", "stream", path)
	}
	return deleted, errors.Join(errs...)
}

package main

import (
	"context"
	"path"
	"strings"
	"sync"

	webhooks "github.com/streamhooks/webhooks"
)

// source is the host's streams, in memory, indexed by directory so that
// MatchStreams of a pattern "/dir/*" costs what it returns, as a host's
// stream store answers a prefix query from an index.
type source struct {
	mu    sync.RWMutex
	tails map[string]string
	byDir map[string][]string
}

func newSource() *source {
	return &source{tails: make(map[string]string), byDir: make(map[string][]string)}
}

// put creates or moves the stream at p to tail.
func (s *source) put(p, tail string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tails[p]; !ok {
		d := path.Dir(p)
		s.byDir[d] = append(s.byDir[d], p)
	}
	s.tails[p] = tail
}

func (s *source) Stream(_ context.Context, p string) (webhooks.StreamInfo, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	tail, ok := s.tails[p]
	if !ok {
		return webhooks.StreamInfo{}, webhooks.ErrStreamNotFound
	}
	return webhooks.StreamInfo{Path: p, Tail: tail}, nil
}

func (s *source) MatchStreams(_ context.Context, pattern *webhooks.Pattern) ([]webhooks.StreamInfo, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []webhooks.StreamInfo
	if dir, ok := strings.CutSuffix(pattern.String(), "/*"); ok && !strings.Contains(dir, "*") {
		for _, p := range s.byDir[dir] {
			out = append(out, webhooks.StreamInfo{Path: p, Tail: s.tails[p]})
		}
		return out, nil
	}
	for p, tail := range s.tails {
		if pattern.Match(p) {
			out = append(out, webhooks.StreamInfo{Path: p, Tail: tail})
		}
	}
	return out, nil
}

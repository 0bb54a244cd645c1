package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	webhooks "github.com/streamhooks/webhooks"
)

var _ webhooks.DSStore = (*Store)(nil)

// dsState holds the DSStore's data, under its own lock: it shares nothing
// with the consumers.
type dsState struct {
	mu   sync.Mutex
	subs map[string]*dsSub // tombstones included
	// byPath holds, for every linked path, its links in the live
	// subscriptions that link it, ordered by subscription ID: an append
	// finds its links in one lookup, whatever their subscriptions' size.
	byPath map[string][]dsLinkRef
}

// dsLinkRef is a link and its subscription.
type dsLinkRef struct {
	sub  *dsSub
	link *webhooks.DSLink
}

// dsSub is a stored DS subscription with its links. links and pending are
// ordered, so that a page is a seek, and an insert moves at most a chunk.
type dsSub struct {
	sub     webhooks.DSSubscription
	deleted bool
	links   map[string]*webhooks.DSLink
	order   pathList // every linked path
	pending pathList // the paths of pending links
	// attempts is its delivery log (webhooks.DSDeliveryLogKey).
	attempts attemptLog
}

func (d *dsSub) cursor() webhooks.DSCursor {
	c := d.sub.Cursor
	c.Pending = d.pending.len() > 0
	return c
}

// live returns the live subscription id; s.ds.mu is held.
func (s *Store) dsLive(id string) (*dsSub, error) {
	d, ok := s.ds.subs[id]
	if !ok || d.deleted {
		return nil, webhooks.ErrDSSubscriptionNotFound
	}
	return d, nil
}

// PutDSSubscription implements webhooks.DSStore.
func (s *Store) PutDSSubscription(_ context.Context, p *webhooks.PutDSSubscriptionParams) (*webhooks.DSSubscription, bool, error) {
	s.ds.mu.Lock()
	defer s.ds.mu.Unlock()
	if s.ds.subs == nil {
		s.ds.subs = make(map[string]*dsSub)
		s.ds.byPath = make(map[string][]dsLinkRef)
	}
	in := p.Subscription
	d, ok := s.ds.subs[in.ID]
	created := false
	switch {
	case ok && !d.deleted && d.sub.ConfigHash != in.ConfigHash:
		return nil, false, webhooks.ErrDSSubscriptionConflict
	case !ok || d.deleted:
		var gen int64
		if ok {
			gen = d.sub.Cursor.Generation
		}
		d = &dsSub{sub: *in.Clone(), links: make(map[string]*webhooks.DSLink)}
		d.sub.Cursor = webhooks.DSCursor{Generation: gen, Status: webhooks.DSActive}
		s.ds.subs[in.ID] = d
		created = true
	}
	s.dsLink(d, p.Links)
	if created {
		s.mu.Lock()
		s.subscriptionsChanged()
		s.mu.Unlock()
	}
	out := d.sub.Clone()
	out.Cursor = d.cursor()
	return out, created, nil
}

// GetDSSubscription implements webhooks.DSStore.
func (s *Store) GetDSSubscription(_ context.Context, id string) (*webhooks.DSSubscription, error) {
	s.ds.mu.Lock()
	defer s.ds.mu.Unlock()
	d, err := s.dsLive(id)
	if err != nil {
		return nil, err
	}
	out := d.sub.Clone()
	out.Cursor = d.cursor()
	return out, nil
}

// ListDSSubscriptions implements webhooks.DSStore.
func (s *Store) ListDSSubscriptions(_ context.Context) ([]*webhooks.DSSubscription, error) {
	s.ds.mu.Lock()
	defer s.ds.mu.Unlock()
	var out []*webhooks.DSSubscription
	for _, d := range s.ds.subs {
		if !d.deleted {
			sub := d.sub.Clone()
			sub.Cursor = d.cursor()
			out = append(out, sub)
		}
	}
	slices.SortFunc(out, func(a, b *webhooks.DSSubscription) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// DeleteDSSubscription implements webhooks.DSStore.
func (s *Store) DeleteDSSubscription(_ context.Context, id string) error {
	s.ds.mu.Lock()
	defer s.ds.mu.Unlock()
	d, err := s.dsLive(id)
	if err != nil {
		return err
	}
	for path := range d.links {
		s.dsUnindex(d, path)
	}
	// The tombstone keeps only the generation a successor continues.
	*d = dsSub{sub: webhooks.DSSubscription{ID: id, Cursor: webhooks.DSCursor{Generation: d.sub.Cursor.Generation}}, deleted: true}
	s.mu.Lock()
	s.subscriptionsChanged()
	s.mu.Unlock()
	return nil
}

func (s *Store) dsUnindex(d *dsSub, path string) {
	refs := slices.DeleteFunc(s.ds.byPath[path], func(r dsLinkRef) bool { return r.sub == d })
	if len(refs) == 0 {
		delete(s.ds.byPath, path)
	} else {
		s.ds.byPath[path] = refs
	}
}

// dsLink links specs to d; s.ds.mu is held.
func (s *Store) dsLink(d *dsSub, specs []webhooks.DSLinkSpec) {
	for _, sp := range specs {
		if l, ok := d.links[sp.Path]; ok {
			l.Type |= sp.Type
			continue
		}
		l := &webhooks.DSLink{Path: sp.Path, Type: sp.Type, AckedOffset: sp.Offset, TailOffset: sp.Offset}
		d.links[sp.Path] = l
		d.order.insert(sp.Path)
		refs := s.ds.byPath[sp.Path]
		i, _ := slices.BinarySearchFunc(refs, d.sub.ID, func(r dsLinkRef, id string) int { return strings.Compare(r.sub.sub.ID, id) })
		s.ds.byPath[sp.Path] = slices.Insert(refs, i, dsLinkRef{sub: d, link: l})
	}
}

// LinkDSStreams implements webhooks.DSStore.
func (s *Store) LinkDSStreams(_ context.Context, p *webhooks.LinkDSStreamsParams) error {
	s.ds.mu.Lock()
	defer s.ds.mu.Unlock()
	d, err := s.dsLive(p.ID)
	if err != nil {
		return err
	}
	s.dsLink(d, p.Links)
	return nil
}

// UnlinkDSStream implements webhooks.DSStore.
func (s *Store) UnlinkDSStream(_ context.Context, p *webhooks.UnlinkDSStreamParams) error {
	s.ds.mu.Lock()
	defer s.ds.mu.Unlock()
	d, err := s.dsLive(p.ID)
	if err != nil {
		return err
	}
	l, ok := d.links[p.Path]
	if !ok {
		return nil
	}
	l.Type &^= webhooks.DSLinkExplicit
	if p.PatternMatches {
		l.Type |= webhooks.DSLinkGlob
	}
	if l.Type != 0 {
		return nil
	}
	delete(d.links, p.Path)
	d.order.remove(p.Path)
	d.pending.remove(p.Path)
	s.dsUnindex(d, p.Path)
	return nil
}

// DropDSStream implements webhooks.DSStore.
func (s *Store) DropDSStream(_ context.Context, path string) error {
	s.ds.mu.Lock()
	defer s.ds.mu.Unlock()
	for _, r := range s.ds.byPath[path] {
		d := r.sub
		delete(d.links, path)
		d.order.remove(path)
		d.pending.remove(path)
	}
	delete(s.ds.byPath, path)
	return nil
}

// ListDSLinks implements webhooks.DSStore.
func (s *Store) ListDSLinks(_ context.Context, p *webhooks.ListDSLinksParams) ([]webhooks.DSLink, error) {
	s.ds.mu.Lock()
	defer s.ds.mu.Unlock()
	d, err := s.dsLive(p.ID)
	if err != nil {
		return nil, err
	}
	var out []webhooks.DSLink
	if len(p.Paths) > 0 {
		paths := slices.Clone(p.Paths)
		slices.Sort(paths)
		for _, path := range slices.Compact(paths) {
			if l, ok := d.links[path]; ok {
				out = append(out, *l)
			}
		}
		return out, nil
	}
	list := &d.order
	if p.PendingOnly {
		list = &d.pending
	}
	for path := range list.after(p.After) {
		if len(out) == p.Limit {
			break
		}
		out = append(out, *d.links[path])
	}
	return out, nil
}

// dsSetOffsets sets l's offsets and keeps its pending flag and d's pending
// list in step; s.ds.mu is held.
func dsSetOffsets(d *dsSub, l *webhooks.DSLink, acked, tail string) {
	l.AckedOffset, l.TailOffset = acked, tail
	pending := tail > acked
	if pending != l.Pending {
		if pending {
			d.pending.insert(l.Path)
		} else {
			d.pending.remove(l.Path)
		}
	}
	l.Pending = pending
}

// NoteDSAppend implements webhooks.DSStore.
func (s *Store) NoteDSAppend(_ context.Context, p *webhooks.NoteDSAppendParams) ([]webhooks.DSLinkedCursor, error) {
	s.ds.mu.Lock()
	defer s.ds.mu.Unlock()
	var out []webhooks.DSLinkedCursor
	for _, r := range s.ds.byPath[p.Path] {
		d, l := r.sub, r.link
		if p.Tail > l.TailOffset {
			dsSetOffsets(d, l, l.AckedOffset, p.Tail)
		}
		c := &d.sub.Cursor
		if c.WakeID == "" && c.Holder == "" && c.DueAt.IsZero() && d.pending.len() > 0 {
			c.DueAt = p.Now
		}
		out = append(out, webhooks.DSLinkedCursor{ID: d.sub.ID, Cursor: d.cursor()})
	}
	return out, nil
}

// UpdateDSCursor implements webhooks.DSStore.
func (s *Store) UpdateDSCursor(_ context.Context, id string, fn func(c *webhooks.DSCursor) error) (*webhooks.DSCursor, error) {
	s.ds.mu.Lock()
	defer s.ds.mu.Unlock()
	d, err := s.dsLive(id)
	if err != nil {
		return nil, err
	}
	c := d.cursor()
	if err := fn(&c); err != nil {
		return nil, err
	}
	d.sub.Cursor = c
	out := d.cursor()
	return &out, nil
}

// ClaimDS implements webhooks.DSStore.
func (s *Store) ClaimDS(_ context.Context, p *webhooks.ClaimDSParams) (*webhooks.DSCursor, error) {
	s.ds.mu.Lock()
	defer s.ds.mu.Unlock()
	d, err := s.dsLive(p.ID)
	if err != nil {
		return nil, err
	}
	c := d.sub.Cursor
	next, err := c.Claim(p)
	if err != nil {
		return nil, err
	}
	d.sub.Cursor = next
	out := d.cursor()
	return &out, nil
}

// AckDS implements webhooks.DSStore.
func (s *Store) AckDS(_ context.Context, p *webhooks.AckDSParams) (*webhooks.DSCursor, error) {
	s.ds.mu.Lock()
	defer s.ds.mu.Unlock()
	d, err := s.dsLive(p.ID)
	if err != nil {
		return nil, err
	}
	if err := d.sub.Cursor.CheckFence(p.Generation, p.WakeID, p.Now); err != nil {
		return nil, err
	}
	for _, a := range p.Acks {
		if _, ok := d.links[a.Path]; !ok {
			return nil, fmt.Errorf("%w: %q", webhooks.ErrDSNotLinked, a.Path)
		}
	}
	for _, a := range p.Acks {
		l := d.links[a.Path]
		acked := max(l.AckedOffset, a.Offset)
		dsSetOffsets(d, l, acked, max(l.TailOffset, acked))
	}
	if p.Done {
		d.sub.Cursor = d.sub.Cursor.EndWake(d.pending.len() > 0, p.Now)
	} else if !p.LeaseUntil.IsZero() {
		d.sub.Cursor.LeaseExpiresAt, d.sub.Cursor.DueAt = p.LeaseUntil, p.LeaseUntil
	}
	out := d.cursor()
	return &out, nil
}

// ReleaseDS implements webhooks.DSStore.
func (s *Store) ReleaseDS(_ context.Context, p *webhooks.ReleaseDSParams) (*webhooks.DSCursor, error) {
	s.ds.mu.Lock()
	defer s.ds.mu.Unlock()
	d, err := s.dsLive(p.ID)
	if err != nil {
		return nil, err
	}
	if err := d.sub.Cursor.CheckFence(p.Generation, p.WakeID, p.Now); err != nil {
		return nil, err
	}
	d.sub.Cursor = d.sub.Cursor.EndWake(d.pending.len() > 0, p.Now)
	out := d.cursor()
	return &out, nil
}

// DueDSSubscriptions implements webhooks.DSStore. It scans the
// subscriptions, not their links.
func (s *Store) DueDSSubscriptions(_ context.Context, now time.Time, limit int) ([]webhooks.DSLinkedCursor, error) {
	s.ds.mu.Lock()
	defer s.ds.mu.Unlock()
	var out []webhooks.DSLinkedCursor
	for id, d := range s.ds.subs {
		if !d.deleted && !d.sub.Cursor.DueAt.IsZero() && !d.sub.Cursor.DueAt.After(now) {
			out = append(out, webhooks.DSLinkedCursor{ID: id, Cursor: d.cursor()})
		}
	}
	slices.SortFunc(out, func(a, b webhooks.DSLinkedCursor) int {
		if c := a.Cursor.DueAt.Compare(b.Cursor.DueAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// NextDSDeadline implements webhooks.DSStore.
func (s *Store) NextDSDeadline(_ context.Context) (time.Time, bool, error) {
	s.ds.mu.Lock()
	defer s.ds.mu.Unlock()
	var next time.Time
	for _, d := range s.ds.subs {
		if due := d.sub.Cursor.DueAt; !d.deleted && !due.IsZero() && (next.IsZero() || due.Before(next)) {
			next = due
		}
	}
	return next, !next.IsZero(), nil
}

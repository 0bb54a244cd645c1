package webhooks

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DSStore is an optional Store capability: the subscriptions of the
// upstream protocol's reserved __ds API and their subscription-level
// cursors. The engine finds it by type assertion on its Store. memstore,
// sqlitestore and pgstore implement it.
//
// A DS subscription has one cursor group (DSCursor: generation, wake id,
// lease, holder, the scheduler's due time) and one DSLink per linked
// stream, each with its own acked offset. A subscription over "**" may link
// 100,000 streams, so every operation but deletion takes only the links it
// names: its cost grows with those, never with the subscription's links.
//
// Pending work. The engine knows tails; the Store knows acked offsets. The
// engine reports each new tail (NoteDSAppend, and the offsets it links and
// acks at), and the Store keeps, per link, the newest tail reported and
// whether it is past the acked offset (DSLink.Pending), and per
// subscription whether any link is (DSCursor.Pending), from an index.
// Offsets compare as byte strings: real offsets are fixed-width, and
// OffsetNone ("-1") sorts before all of them.
//
// Fencing is the Store's: AckDS, ReleaseDS and ClaimDS check the generation,
// wake id, lease and holder in the same atomic step that moves cursors, and
// refuse a stale request with a *DSFencedError or *DSClaimedError, moving
// nothing. Deleting a subscription tombstones it: every later call on it
// answers ErrDSSubscriptionNotFound and moves nothing, and a subscription
// created again under the same ID continues its generations, so tokens of
// the deleted one stay fenced.
//
// Glob matching is the engine's: it keeps the patterns of
// ListDSSubscriptions in memory and links a matching stream (LinkDSStreams,
// DSLinkGlob) before it reports that stream's append. It never links a
// subscription's own wake stream by its pattern.
//
// A Store that is a SubscriptionFeed also reports DS subscriptions created
// and deleted, so that engines sharing it reload their patterns.
//
// Times are the engine's clock's, passed in: a Store never reads a clock.
type DSStore interface {
	// PutDSSubscription creates p.Subscription, or re-confirms it if a
	// live subscription with its ID has the same ConfigHash, and then
	// links p.Links as LinkDSStreams does, atomically with the create. It
	// reports whether it created, and returns the subscription as stored.
	// A live one with another ConfigHash is left alone and answered
	// ErrDSSubscriptionConflict. On create it stores the subscription's
	// fields but its Cursor, which starts idle and active, at the
	// generation of a deleted predecessor of the same ID, or 0.
	PutDSSubscription(ctx context.Context, p *PutDSSubscriptionParams) (sub *DSSubscription, created bool, err error)
	// GetDSSubscription returns the subscription with its cursor, not its
	// links (ListDSLinks), or ErrDSSubscriptionNotFound if there is none
	// or it was deleted.
	GetDSSubscription(ctx context.Context, id string) (*DSSubscription, error)
	// ListDSSubscriptions returns every live subscription, ordered by ID,
	// without links.
	ListDSSubscriptions(ctx context.Context) ([]*DSSubscription, error)
	// DeleteDSSubscription tombstones the subscription and drops its
	// links. It returns ErrDSSubscriptionNotFound if there is none or it
	// was deleted already.
	DeleteDSSubscription(ctx context.Context, id string) error

	// LinkDSStreams links p.Links to subscription p.ID. Linking is
	// idempotent: a stream already linked keeps its acked offset and tail
	// and gains the link type, so that a stream both explicit and glob is
	// one link with both. A new link starts at its Offset, acked and as
	// tail, so it has no pending work. It returns
	// ErrDSSubscriptionNotFound if there is no live subscription p.ID.
	LinkDSStreams(ctx context.Context, p *LinkDSStreamsParams) error
	// UnlinkDSStream removes the explicit link of p.Path. The link stays,
	// as a glob link, if it was glob-linked too or p.PatternMatches is
	// set; otherwise it is dropped. An absent link is no error. It returns
	// ErrDSSubscriptionNotFound if there is no live subscription p.ID.
	UnlinkDSStream(ctx context.Context, p *UnlinkDSStreamParams) error
	// DropDSStream removes every link of stream path, glob and explicit,
	// from every live subscription: the stream was deleted, so a stream
	// created again at path is linked afresh, before its first event, and
	// no wake lists the deleted one. It is no error if nothing links path.
	// Its cost grows with the subscriptions that link path.
	DropDSStream(ctx context.Context, path string) error
	// ListDSLinks returns links of subscription p.ID: those of p.Paths
	// that are linked, ordered by path, if p.Paths is set; otherwise a
	// page of up to p.Limit whose paths sort after p.After, ordered by
	// path, only the pending ones if p.PendingOnly is set. It returns
	// ErrDSSubscriptionNotFound if there is no live subscription p.ID.
	ListDSLinks(ctx context.Context, p *ListDSLinksParams) ([]DSLink, error)

	// NoteDSAppend records that stream p.Path's tail is now p.Tail: every
	// link of the path, in any live subscription, whose tail is before it
	// takes it. An idle subscription (no wake id, no holder) that now has
	// pending work gets DueAt p.Now, if its DueAt is not set already, so
	// that its wake survives a crash of the engine that saw the append.
	// It returns the IDs of the subscriptions that link the path, ordered,
	// with their cursors as stored afterwards. Its cost grows with those
	// subscriptions, not with their links.
	NoteDSAppend(ctx context.Context, p *NoteDSAppendParams) ([]DSLinkedCursor, error)
	// UpdateDSCursor is an atomic read-modify-write of the cursor of
	// subscription id: it calls fn with a copy and stores what fn leaves,
	// except Pending, which is the Store's. The engine starts wakes,
	// schedules retries and expires leases with it. If fn returns an
	// error nothing changes and UpdateDSCursor returns that error. It
	// returns ErrDSSubscriptionNotFound, without calling fn, if there is
	// no live subscription id. fn may run more than once, each time on a
	// fresh copy.
	UpdateDSCursor(ctx context.Context, id string, fn func(c *DSCursor) error) (*DSCursor, error)

	// ClaimDS gives the lease of subscription p.ID to p.Worker until
	// p.LeaseUntil. It refuses with a *DSClaimedError if another holder's
	// lease is live (its LeaseExpiresAt after p.Now). The holder's own
	// claim extends its lease. Otherwise, if a wake is in flight and its
	// lease has not lapsed, the worker takes that wake; if not, the claim
	// starts a new one: Generation+1 and WakeID p.WakeID. DueAt becomes
	// the lease's end, Attempt 0, Status active. It returns the cursor as
	// stored afterwards.
	ClaimDS(ctx context.Context, p *ClaimDSParams) (*DSCursor, error)
	// AckDS applies p.Acks: each link's acked offset becomes the later of
	// it and the ack's, and its tail no earlier than that. If p.Done the
	// wake ends: no wake id, holder or lease, Attempt 0, Status active,
	// and DueAt p.Now if work is pending (the next wake), else unset.
	// Otherwise it is a heartbeat: a set p.LeaseUntil becomes the lease's
	// end and DueAt. It refuses, moving nothing, with a *DSFencedError if
	// p.Generation and p.WakeID are not the current wake's or its lease
	// lapsed (LeaseExpiresAt set and not after p.Now), and with an error
	// wrapping ErrDSNotLinked if an ack names a stream not linked. It
	// returns the cursor as stored afterwards.
	AckDS(ctx context.Context, p *AckDSParams) (*DSCursor, error)
	// ReleaseDS ends the current wake without acking, as AckDS with Done
	// and no acks does, with the same fencing.
	ReleaseDS(ctx context.Context, p *ReleaseDSParams) (*DSCursor, error)

	// DueDSSubscriptions returns up to limit live subscriptions whose
	// cursor's DueAt is set and not after now, earliest first, with their
	// cursors.
	DueDSSubscriptions(ctx context.Context, now time.Time, limit int) ([]DSLinkedCursor, error)
	// NextDSDeadline returns the earliest set DueAt of a live
	// subscription, and false if none has one.
	NextDSDeadline(ctx context.Context) (time.Time, bool, error)
}

// Errors of a DSStore. Match them with errors.Is.
var (
	// ErrDSSubscriptionNotFound answers a call on a DS subscription that
	// does not exist or was deleted.
	ErrDSSubscriptionNotFound = errors.New("webhooks: __ds subscription not found")
	// ErrDSSubscriptionConflict answers PutDSSubscription for an ID whose
	// live subscription has another configuration.
	ErrDSSubscriptionConflict = errors.New("webhooks: __ds subscription exists with another configuration")
	// ErrDSFenced is what a *DSFencedError matches.
	ErrDSFenced = errors.New("webhooks: __ds request fenced")
	// ErrDSAlreadyClaimed is what a *DSClaimedError matches.
	ErrDSAlreadyClaimed = errors.New("webhooks: __ds subscription already claimed")
	// ErrDSNotLinked answers an ack of a stream the subscription does not
	// link.
	ErrDSNotLinked = errors.New("webhooks: stream not linked to the __ds subscription")
)

// DSFencedError refuses an ack, callback or release of a wake that is not
// the current one. It matches ErrDSFenced.
type DSFencedError struct {
	// Generation and WakeID are the current wake's; WakeID is empty if
	// none is in flight.
	Generation int64
	WakeID     string
}

func (e *DSFencedError) Error() string {
	return fmt.Sprintf("webhooks: __ds request fenced (current generation %d)", e.Generation)
}

// Is makes errors.Is(err, ErrDSFenced) true.
func (e *DSFencedError) Is(target error) bool { return target == ErrDSFenced }

// DSClaimedError refuses a claim while another worker's lease is live. It
// matches ErrDSAlreadyClaimed.
type DSClaimedError struct {
	Holder     string
	Generation int64
}

func (e *DSClaimedError) Error() string {
	return fmt.Sprintf("webhooks: __ds subscription claimed by %q (generation %d)", e.Holder, e.Generation)
}

// Is makes errors.Is(err, ErrDSAlreadyClaimed) true.
func (e *DSClaimedError) Is(target error) bool { return target == ErrDSAlreadyClaimed }

// DSType is how a DS subscription delivers: DSWebhook or DSPullWake.
type DSType string

// The DS delivery types, spelled as on the wire.
const (
	DSWebhook  DSType = "webhook"
	DSPullWake DSType = "pull-wake"
)

// DSStatus is a DS subscription's delivery status, spelled as on the
// wire: DSActive, or DSFailed while a webhook retry is scheduled.
type DSStatus string

// The DS statuses.
const (
	DSActive DSStatus = "active"
	DSFailed DSStatus = "failed"
)

// DSLinkType says how a stream is linked. A link may be both; Explicit
// wins when shown.
type DSLinkType uint8

// The link types, as flags.
const (
	DSLinkGlob DSLinkType = 1 << iota
	DSLinkExplicit
)

// String is the wire spelling: "explicit" if explicit, else "glob".
func (t DSLinkType) String() string {
	if t&DSLinkExplicit != 0 {
		return "explicit"
	}
	return "glob"
}

// DSSubscription is a subscription of the __ds API. Its configuration
// never changes after it is created; Cursor changes with delivery.
type DSSubscription struct {
	ID      string
	Type    DSType
	Pattern string
	// Streams are the explicit streams of its configuration, normalized.
	// The links (ListDSLinks) are the live membership.
	Streams     []string
	WebhookURL  string
	WakeStream  string
	LeaseTTL    time.Duration
	Description string
	// ConfigHash is the hash of the normalized configuration by which
	// PutDSSubscription tells a re-confirmation from a conflict.
	ConfigHash string
	CreatedAt  time.Time
	Cursor     DSCursor
}

// Clone returns a deep copy of s.
func (s *DSSubscription) Clone() *DSSubscription {
	if s == nil {
		return nil
	}
	out := *s
	out.Streams = append([]string(nil), s.Streams...)
	return &out
}

// DSCursor is the cursor group of a DS subscription, beside its links.
type DSCursor struct {
	// Generation increases with every wake; it fences older wakes.
	Generation int64
	// WakeID is the wake in flight, or empty when none is.
	WakeID string
	// Holder is the pull-wake worker that claimed the wake, or empty.
	Holder string
	// LeaseExpiresAt ends the current lease; zero when none is held.
	LeaseExpiresAt time.Time
	// DueAt is when the scheduler must next act on the subscription (a
	// wake to start, a retry, a lease to expire); zero means never.
	// DueDSSubscriptions answers from an index of it.
	DueAt time.Time
	// Attempt counts the delivery attempts of the current wake.
	Attempt int
	// Status is DSFailed while a webhook retry is scheduled.
	Status DSStatus
	// Pending reports whether any link has pending work. The Store sets
	// it; UpdateDSCursor ignores a change to it.
	Pending bool
}

// DSLink is one stream linked to a DS subscription, with its cursor.
type DSLink struct {
	Path string
	Type DSLinkType
	// AckedOffset is the last processed offset, inclusive; OffsetNone if
	// nothing is.
	AckedOffset string
	// TailOffset is the newest tail reported for the stream.
	TailOffset string
	// Pending reports whether TailOffset is after AckedOffset.
	Pending bool
}

// DSLinkSpec is a stream to link and how.
type DSLinkSpec struct {
	Path string
	Type DSLinkType
	// Offset is where a new link starts, acked and as tail: the stream's
	// tail at creation or at an explicit add, the offset before the
	// append that discovered it. OffsetNone if nothing is before it.
	Offset string
}

// DSLinkedCursor is a subscription's ID and its cursor.
type DSLinkedCursor struct {
	ID     string
	Cursor DSCursor
}

// PutDSSubscriptionParams are the arguments of DSStore.PutDSSubscription.
type PutDSSubscriptionParams struct {
	Subscription *DSSubscription
	// Links are linked atomically with the create or re-confirmation:
	// the eager backfill and the explicit streams.
	Links []DSLinkSpec
}

// LinkDSStreamsParams are the arguments of DSStore.LinkDSStreams.
type LinkDSStreamsParams struct {
	ID    string
	Links []DSLinkSpec
}

// UnlinkDSStreamParams are the arguments of DSStore.UnlinkDSStream.
type UnlinkDSStreamParams struct {
	ID   string
	Path string
	// PatternMatches keeps the link as a glob link: the engine sets it
	// when the subscription's pattern matches Path.
	PatternMatches bool
}

// ListDSLinksParams are the arguments of DSStore.ListDSLinks.
type ListDSLinksParams struct {
	ID string
	// Paths, if set, selects these links, and After, Limit and
	// PendingOnly are ignored.
	Paths []string
	// After is the path of the last link of the previous page, or "".
	After string
	// Limit is the most links of a page; it is at least 1.
	Limit int
	// PendingOnly keeps only the links with pending work.
	PendingOnly bool
}

// NoteDSAppendParams are the arguments of DSStore.NoteDSAppend.
type NoteDSAppendParams struct {
	Path string
	Tail string
	Now  time.Time
}

// ClaimDSParams are the arguments of DSStore.ClaimDS.
type ClaimDSParams struct {
	ID     string
	Worker string
	// WakeID names the wake if the claim starts one.
	WakeID     string
	Now        time.Time
	LeaseUntil time.Time
}

// DSAck acks one stream up to Offset, inclusive.
type DSAck struct {
	Path   string
	Offset string
}

// AckDSParams are the arguments of DSStore.AckDS.
type AckDSParams struct {
	ID         string
	Generation int64
	WakeID     string
	Acks       []DSAck
	Done       bool
	Now        time.Time
	// LeaseUntil, if set and not Done, extends the lease.
	LeaseUntil time.Time
}

// ReleaseDSParams are the arguments of DSStore.ReleaseDS.
type ReleaseDSParams struct {
	ID         string
	Generation int64
	WakeID     string
	Now        time.Time
}

// The rules below are the DSStore's, shared by every backend so that they
// agree: a backend reads the cursor with the row locked, applies the rule
// and writes the result in the same transaction.

// CheckFence returns nil if generation and wakeID name c's wake in flight
// and its lease, if any, has not lapsed at now; otherwise a *DSFencedError.
func (c DSCursor) CheckFence(generation int64, wakeID string, now time.Time) error {
	if c.WakeID == "" || generation != c.Generation || wakeID != c.WakeID ||
		(!c.LeaseExpiresAt.IsZero() && !c.LeaseExpiresAt.After(now)) {
		return &DSFencedError{Generation: c.Generation, WakeID: c.WakeID}
	}
	return nil
}

// Claim returns c after the claim p, or a *DSClaimedError, as
// DSStore.ClaimDS describes.
func (c DSCursor) Claim(p *ClaimDSParams) (DSCursor, error) {
	live := !c.LeaseExpiresAt.IsZero() && c.LeaseExpiresAt.After(p.Now)
	if c.Holder != "" && c.Holder != p.Worker && live {
		return c, &DSClaimedError{Holder: c.Holder, Generation: c.Generation}
	}
	lapsed := !c.LeaseExpiresAt.IsZero() && !live
	if c.WakeID == "" || lapsed {
		c.Generation++
		c.WakeID = p.WakeID
	}
	c.Holder = p.Worker
	c.LeaseExpiresAt, c.DueAt = p.LeaseUntil, p.LeaseUntil
	c.Attempt, c.Status = 0, DSActive
	return c, nil
}

// EndWake returns c with its wake ended, as DSStore.AckDS with Done
// describes; pending says whether any link has pending work.
func (c DSCursor) EndWake(pending bool, now time.Time) DSCursor {
	c.WakeID, c.Holder, c.LeaseExpiresAt = "", "", time.Time{}
	c.Attempt, c.Status = 0, DSActive
	c.DueAt = time.Time{}
	if pending {
		c.DueAt = now
	}
	return c
}

package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// A tenant is one of a host's customers. Each subscription belongs to one
// (Subscription.Tenant), or to none. A request or a Go call acts within a
// tenant, or within none, as an operator who sees every tenant:
//
//   - a subscription API request acts within the tenant that
//     Tenancy.Tenant names for it, once the Authorizer has allowed it;
//   - a Go call acts within the tenant of its context (WithTenant).
//
// Within a tenant, lists show only its subscriptions, and every read or
// operation on another's answers ErrSubscriptionNotFound (404), as if it
// did not exist, so that IDs do not leak. Subscription IDs stay one
// namespace: creating an ID that another tenant holds is refused with
// ErrSubscriptionExists (409), which tells only that the ID is taken, as
// it would for any taken ID; a host that would hide even that gives each
// tenant IDs of its own, say prefixed by the tenant, in its Authorizer.

// MaxTenantLength bounds a tenant's name.
const MaxTenantLength = 128

// ErrTenantLimit refuses to create a subscription for a tenant that has
// as many as Tenancy.MaxSubscriptions: 403 TENANT_LIMIT_REACHED.
var ErrTenantLimit = errors.New("webhooks: tenant subscription limit reached")

// Tenancy keeps a host's tenants apart (WithTenancy).
type Tenancy struct {
	// Tenant names the tenant of a subscription API request that the
	// Authorizer has allowed, or "" for an operator's request, which sees
	// every tenant. An error wrapping ErrUnauthorized or ErrForbidden
	// refuses the request; any other is logged and answered 500, as is a
	// name that ValidateTenant refuses. Required.
	Tenant func(r *http.Request) (string, error)
	// Patterns returns the stream patterns that tenant may subscribe to:
	// a subscription of the tenant is created, and updated, only if every
	// stream its pattern can match is matched by one of them, and
	// refused with ErrForbidden (403) otherwise. For example
	// "/tenants/"+tenant+"/**". Nil allows every pattern. A pattern that
	// ParsePattern refuses is the host's error: logged, answered 500.
	Patterns func(tenant string) []string
	// MaxSubscriptions bounds the subscriptions of each tenant; past it a
	// create is refused with ErrTenantLimit. Zero means no bound.
	MaxSubscriptions int
}

// WithTenancy scopes the subscription API, and Go calls made WithTenant,
// to tenants (see Tenancy).
func WithTenancy(t Tenancy) Option {
	return func(c *config) error {
		if t.Tenant == nil {
			return fmt.Errorf("WithTenancy: Tenant is nil")
		}
		if t.MaxSubscriptions < 0 {
			return fmt.Errorf("WithTenancy: MaxSubscriptions %d is negative", t.MaxSubscriptions)
		}
		c.tenancy = &t
		return nil
	}
}

// ValidateTenant reports whether tenant may name a tenant, with a
// *ValidationError if not: the characters of a subscription ID, at most
// MaxTenantLength of them. "" is no tenant.
func ValidateTenant(tenant string) error {
	if tenant == "" {
		return nil
	}
	if len(tenant) > MaxTenantLength {
		return invalid("tenant", "tenant is longer than %d characters", MaxTenantLength)
	}
	if ValidateSubscriptionID(tenant) != nil {
		return invalid("tenant", "tenant %q may use only letters, digits, '-', '_' and '.'", tenant)
	}
	return nil
}

type tenantKey struct{}

// WithTenant returns ctx acting within tenant: the Engine's Go calls made
// with it see and change only that tenant's subscriptions, and
// CreateSubscription creates them in it. "" acts within none, as an
// operator.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// TenantFromContext returns the tenant ctx acts within, and false if it
// acts within none.
func TenantFromContext(ctx context.Context) (string, bool) {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t, t != ""
}

// TenantContext returns r's context acting within r's tenant, as the
// subscription API does (Tenancy.Tenant), so that an operator's screen
// such as package ui makes its Go calls within it. Without WithTenancy
// it is r's context as it is. Call it once the Authorizer has allowed r.
func (e *Engine) TenantContext(r *http.Request) (context.Context, error) {
	return e.tenantContext(r.Context(), r)
}

// tenantContext returns ctx acting within r's tenant.
func (e *Engine) tenantContext(ctx context.Context, r *http.Request) (context.Context, error) {
	t := e.cfg.tenancy
	if t == nil {
		return ctx, nil
	}
	tenant, err := t.Tenant(r)
	if err != nil {
		return nil, fmt.Errorf("naming the tenant: %w", err)
	}
	if err := ValidateTenant(tenant); err != nil {
		// The host's error, not the client's: a 500.
		return nil, fmt.Errorf("the host named an invalid tenant: %s", err)
	}
	return WithTenant(ctx, tenant), nil
}

// visible reports whether a call with ctx may see sub.
func visible(ctx context.Context, sub *Subscription) bool {
	t, ok := TenantFromContext(ctx)
	return !ok || sub.Tenant == t
}

// inScope returns ErrSubscriptionNotFound if a call with ctx may not see
// subscription id, and nil without a tenant.
func (e *Engine) inScope(ctx context.Context, id string) error {
	if _, ok := TenantFromContext(ctx); !ok {
		return nil
	}
	_, err := e.subscription(ctx, id)
	return err
}

// checkTenantPattern refuses sub if its tenant may not subscribe to its
// pattern.
func (e *Engine) checkTenantPattern(sub *Subscription) error {
	t := e.cfg.tenancy
	if t == nil || t.Patterns == nil || sub.Tenant == "" {
		return nil
	}
	p, err := ParsePattern(sub.Pattern)
	if err != nil {
		return asInvalid("pattern", err)
	}
	for _, s := range t.Patterns(sub.Tenant) {
		allowed, err := ParsePattern(s)
		if err != nil {
			return fmt.Errorf("tenant %s: the host's pattern %q: %w", sub.Tenant, s, err)
		}
		if allowed.covers(p) {
			return nil
		}
	}
	return detail(ErrForbidden, "tenant %s may not subscribe to %s", sub.Tenant, sub.Pattern)
}

// checkTenantLimit refuses a new subscription of tenant if it has
// Tenancy.MaxSubscriptions already.
func (e *Engine) checkTenantLimit(ctx context.Context, tenant string) error {
	t := e.cfg.tenancy
	if t == nil || t.MaxSubscriptions == 0 || tenant == "" {
		return nil
	}
	subs, err := e.store.ListSubscriptions(ctx)
	if err != nil {
		return err
	}
	n := 0
	for _, s := range subs {
		if s.Tenant == tenant {
			n++
		}
	}
	if n >= t.MaxSubscriptions {
		return detail(ErrTenantLimit, "tenant %s has %d subscriptions, its limit; delete one to create another", tenant, n)
	}
	return nil
}

// covers reports whether every path that q matches, p matches too: a
// segment-by-segment comparison where `**` of p covers any run of q's
// segments, `*` of p any one segment but `**`, and a literal only itself.
func (p *Pattern) covers(q *Pattern) bool {
	a, b := p.segs, q.segs
	// ok[i][j]: a[i:] covers b[j:].
	ok := make([][]bool, len(a)+1)
	for i := range ok {
		ok[i] = make([]bool, len(b)+1)
	}
	ok[len(a)][len(b)] = true
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b); j >= 0; j-- {
			switch {
			case a[i] == "**":
				ok[i][j] = ok[i+1][j] || (j < len(b) && ok[i][j+1])
			case j == len(b) || b[j] == "**":
			case a[i] == "*" || a[i] == b[j]:
				ok[i][j] = ok[i+1][j+1]
			}
		}
	}
	return ok[0][0]
}

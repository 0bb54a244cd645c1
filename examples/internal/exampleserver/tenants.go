package exampleserver

import (
	"errors"
	"net/http"

	webhooks "github.com/streamhooks/webhooks"
)

// TenantPrefix is where each tenant's streams are: a tenant's
// subscriptions keep to TenantPrefix + tenant + "/**".
const TenantPrefix = "/tenants/"

// tenantOf names the tenant of a request by its bearer token: the
// tenant whose token it is, or "" for the operator's API token. Any other
// request the Authorizer has already refused.
func tenantOf(apiToken string, tokens map[string]string) func(r *http.Request) (string, error) {
	return func(r *http.Request) (string, error) {
		for tenant, token := range tokens {
			if hasToken(r, token) {
				return tenant, nil
			}
		}
		if apiToken == "" || hasToken(r, apiToken) {
			return "", nil
		}
		return "", webhooks.ErrUnauthorized
	}
}

// tenancy scopes the subscription API by cfg's tenant tokens, or returns
// nil without any.
func tenancy(cfg Config) ([]webhooks.Option, error) {
	if len(cfg.TenantTokens) == 0 {
		if cfg.TenantMaxSubscriptions != 0 {
			return nil, errors.New("a tenant subscription limit needs tenant tokens")
		}
		return nil, nil
	}
	if cfg.TenantMaxSubscriptions < 0 {
		return nil, errors.New("a tenant subscription limit must not be negative")
	}
	if cfg.APIToken == "" {
		return nil, errors.New("tenant tokens need an API token, the operator's")
	}
	for tenant, token := range cfg.TenantTokens {
		if err := webhooks.ValidateTenant(tenant); err != nil || tenant == "" {
			return nil, errors.New("tenant " + tenant + ": a tenant is 1 to 128 letters, digits, '-', '_' and '.'")
		}
		if token == "" || token == cfg.APIToken {
			return nil, errors.New("tenant " + tenant + ": its token must be set and differ from the API token")
		}
	}
	return []webhooks.Option{webhooks.WithTenancy(webhooks.Tenancy{
		Tenant:           tenantOf(cfg.APIToken, cfg.TenantTokens),
		Patterns:         func(tenant string) []string { return []string{TenantPrefix + tenant + "/**"} },
		MaxSubscriptions: cfg.TenantMaxSubscriptions,
	})}, nil
}

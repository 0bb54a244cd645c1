package webhooks

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Every secret the engine makes, in either scheme, passes the rule a
// client's secret must: a client may give back one the engine made.
func TestGeneratedSecretsAreValid(t *testing.T) {
	for _, scheme := range []SignatureScheme{SignatureStreamhooks, SignatureStandard} {
		for range 2000 {
			require.NoError(t, ValidateSecret(newSecret(scheme)), scheme)
		}
	}
}

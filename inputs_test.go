package webhooks_test

import (
	"net/http"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// formatSource is a fakeSource that knows its offset format.
type formatSource struct{ *fakeSource }

var offsetFormat = regexp.MustCompile(`^[0-9]{16}_[0-9]{16}$`)

func (formatSource) ValidOffset(o string) bool { return offsetFormat.MatchString(o) }

// ackGarbage acks each offset in a live consumer's primary stream (tail
// offset(10)) and checks that each is refused with INVALID_OFFSET and
// changes nothing, while a real offset is still accepted.
func ackGarbage(t *testing.T, h *harness, garbage []string) {
	t.Helper()
	d := h.live()
	for _, o := range garbage {
		require.Len(t, o, len(offset(10)), "%q has the tail's length: length alone does not tell", o)
		r := h.callback(agentAID, d.n.Token, webhooks.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets(agentA, o)})
		requireError(t, r, http.StatusConflict, webhooks.CodeInvalidOffset)
		require.Equal(t, streamOffsets(agentA, webhooks.OffsetNone), h.consumer(agentAID).Streams, "%q", o)
	}
	r := h.callback(agentAID, d.n.Token, webhooks.CallbackRequest{Epoch: epoch(1), Acks: streamOffsets(agentA, offset(3))})
	require.Equal(t, http.StatusOK, r.status, r.raw)
}

// A source that knows its offset format decides which acks are offsets.
func TestAckOffsetBySourceFormat(t *testing.T) {
	h := newHarnessWrapped(t, func(s *fakeSource) webhooks.StreamSource { return formatSource{s} })
	ackGarbage(t, h, []string{"0000000000000000_00000000000000!!", "0000000000000000-0000000000000003"})
}

// Without one, the protocol's rules decide: an offset is a header value
// without the characters the protocol reserves.
func TestAckOffsetByProtocolRules(t *testing.T) {
	h := newHarness(t)
	prefix := offset(10)[:len(offset(10))-2] + "0" // sorts before the tail whatever follows
	var garbage []string
	for _, c := range []string{"/", ",", "&", "=", "?", " ", "\x00", "\x1f", "\x7f"} {
		garbage = append(garbage, prefix+c)
	}
	ackGarbage(t, h, garbage)
}

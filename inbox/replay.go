package inbox

import (
	"encoding/json"
	"io"
	"net/http"
)

// maxDeadLetterBytes bounds a replay request: a dead letter holds a record
// of at most the Handler's body limit, base64, and its errors.
const maxDeadLetterBytes = 4 << 20

// ReplayHandler returns an operator's http.Handler that replays the dead
// letter a POST carries, as read from a provider's dead-letter stream
// (Replay): 200 {"ok":true} once the record is appended again; 400 for a
// body that is not a dead letter, or one that holds no record; 404 for a provider the Processor lacks;
// 503 if the append fails. The host mounts it behind its own operator
// authentication, and trusts its operators with every field of the body,
// ReceivedAt among them: Admin.Handler, which replays only what the
// dead-letter stream holds, is the route to mount otherwise.
func (p *Processor) ReplayHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, codeInvalidRequest, "replay a dead letter with POST")
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxDeadLetterBytes))
		if err != nil {
			writeError(w, http.StatusRequestEntityTooLarge, codeInvalidRequest, "the body is unreadable or too large for a dead letter")
			return
		}
		var d DeadLetter
		if json.Unmarshal(body, &d) != nil || d.Provider == "" || d.Reason == "" || d.Raw != nil {
			writeError(w, http.StatusBadRequest, codeInvalidRequest, "the body is not a dead letter as read from a dead-letter stream")
			return
		}
		if p.providers[d.Provider] == nil {
			writeError(w, http.StatusNotFound, codeProviderNotFound, "no provider "+d.Provider)
			return
		}
		if err := p.Replay(r.Context(), body); err != nil {
			p.log.ErrorContext(r.Context(), "inbox: replaying a dead letter failed", "provider", d.Provider, "delivery_id", d.DeliveryID, "error", err)
			w.Header().Set("Retry-After", retryAfter)
			writeError(w, http.StatusServiceUnavailable, codeServiceUnavailable, "the record could not be stored again; retry later")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`+"\n")
	})
}

package webhooks

// successResponse is the wire form of a successful callback: streams is
// always included, even when empty. The callback API's other wire types
// and its error codes are package receiver's.
type successResponse struct {
	OK      bool           `json:"ok"`
	Token   string         `json:"token"`
	Streams []StreamOffset `json:"streams"`
}

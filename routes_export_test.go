package webhooks

// Route is one row of the route table, as a test sees it.
type Route struct {
	Method string
	// Shape is "list", "subscription", "callback" or "reserved".
	Shape string
	// Query names the operation beside subscription={id}, or is "".
	Query string
	Op    Operation
}

// Routes lists the route table.
func Routes() []Route {
	names := map[shape]string{shapeList: "list", shapeSubscription: "subscription", shapeCallback: "callback", shapeReserved: "reserved"}
	out := make([]Route, len(routes))
	for i, rt := range routes {
		out[i] = Route{Method: rt.method, Shape: names[rt.shape], Query: rt.query, Op: rt.op}
	}
	return out
}

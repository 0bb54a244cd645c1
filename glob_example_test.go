package webhooks_test

import (
	"fmt"

	webhooks "github.com/streamhooks/webhooks"
)

func ExampleParsePattern() {
	p, err := webhooks.ParsePattern("/agents/*/inbox")
	if err != nil {
		panic(err)
	}
	fmt.Println(p)
	fmt.Println(p.Match("/agents/worker-1/inbox"))
	fmt.Println(p.Match("/agents/worker-1/outbox"))

	deep, _ := webhooks.ParsePattern("/agents/**")
	fmt.Println(deep.Match("/agents"), deep.Match("/agents/a/b/c"))

	_, err = webhooks.ParsePattern("/agents/foo*")
	fmt.Println(err)
	// Output:
	// /agents/*/inbox
	// true
	// false
	// true true
	// invalid pattern "/agents/foo*": segment "foo*" mixes '*' with other characters; '*' must be a whole segment
}

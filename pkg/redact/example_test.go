package redact_test

import (
	"fmt"
	"net/url"

	"github.com/seqctl/seqctl/pkg/redact"
)

func ExampleURL() {
	fmt.Println(redact.URL("rediss://app:50%off@redis:6380/0")) // does not parse
	fmt.Println(redact.URL("https://hooks.example/orders?token=abc&tenant=7"))
	fmt.Println(redact.URL("host=db user=app password=hunter2"))
	// Output:
	// rediss://app:xxxxx@redis:6380/0
	// https://hooks.example/orders?token=xxxxx&tenant=7
	// host=db user=app password=xxxxx
}

func ExampleError() {
	raw := "postgres://app:50%off@db/app"
	_, err := url.Parse(raw)
	fmt.Println(redact.Error(err, raw))
	// Output:
	// parse "postgres://app:xxxxx@db/app": invalid URL escape (percent-encode a % in a password as %25, an @ as %40, a : as %3A)
}

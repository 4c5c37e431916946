package redact

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"redis://:pw@h:1/0", "redis://:xxxxx@h:1/0"},
		{"redis://user:pw@h:1/0", "redis://user:xxxxx@h:1/0"},
		{"redis://user@h:1/0", "redis://user@h:1/0"},
		{"rediss://app:50%off@h:6380/0", "rediss://app:xxxxx@h:6380/0"}, // does not parse
		{"redis://app:p@ss:w0rd@h:1/0", "redis://app:xxxxx@h:1/0"},      // @ and : in the password
		{"redis://:ab/cd+ef@h:1/0", "redis://:xxxxx@h:1/0"},             // / in the password
		{"redis://:12/34@h:1/0", "redis://:xxxxx@h:1/0"},                // parses, host ":12"
		{"redis://u:12#34@h", "redis://u:xxxxx@h"},                      // # in the password
		{"postgres://app:s3cr%t@db:5432/app?sslmode=disable", "postgres://app:xxxxx@db:5432/app?sslmode=disable"},
		{"postgres://app@db/app?password=hunter22&sslmode=require", "postgres://app@db/app?password=xxxxx&sslmode=require"},
		{"host=db user=app password='a b\\'c' dbname=x", "host=db user=app password=xxxxx dbname=x"},
		{"host=db password=hunter22", "host=db password=xxxxx"},
		{"host = db password = hunter22", "host=db password=xxxxx"},
		{"app:hunter22@db:5432", "app:xxxxx@db:5432"},
		{"https://hooks.example/x?token=abc&kind=order", "https://hooks.example/x?token=xxxxx&kind=order"},
		{"https://h/x?api_key=1&Access_Token=2&X-Amz-Signature=3&sig=4&auth=5&pwd=6", "https://h/x?api_key=xxxxx&Access_Token=xxxxx&X-Amz-Signature=xxxxx&sig=xxxxx&auth=xxxxx&pwd=xxxxx"},
		{"https://h/x#access_token=abc", "https://h/x#access_token=xxxxx"},
		{"https://h/x?token=", "https://h/x?token="},
		{"https://h/users/a@b.example?notify=ops@example.com", "https://h/users/a@b.example?notify=ops@example.com"},
		{"https://u:p@h:8443/a@b", "https://u:xxxxx@h:8443/a@b"},
		{"http://hook:12/34#x?y@127.0.0.1:1/orders", "http://hook:xxxxx@127.0.0.1:1/orders"}, // parses, host "hook:12"
		{"https://h:8443/users/a@b", "https://h:xxxxx@b"},                                    // read the same way: masked too much, never too little
		{"https://hook:pw@h/x?%zz&token=t", "https://hook:xxxxx@h/x?%zz&token=xxxxx"},
		{"sqlite://outbox.db?_pragma=busy_timeout(100)", "sqlite://outbox.db?_pragma=busy_timeout(100)"},
		{"sqlite::memory:", "sqlite::memory:"},
		{"", ""},
		{"not a url at all", "not a url at all"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := URL(tt.in); got != tt.want {
				t.Errorf("URL(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestError(t *testing.T) {
	tests := []struct {
		name   string
		raw    string
		err    func(raw string) error
		secret string
		want   string // a part of the redacted text
	}{
		{"url.Parse, bad escape", "redis://app:50%off@h:1/0", func(raw string) error { _, err := url.Parse(raw); return err },
			"off", `parse "redis://app:xxxxx@h:1/0": invalid URL escape (percent-encode`},
		{"url.Parse, bad port", "redis://app:pa/ss@h:1/0", func(raw string) error { _, err := url.Parse(raw); return err },
			":pa", `invalid port after host`},
		{"wrapped", "postgres://u:hunter22@h/db", func(raw string) error { return fmt.Errorf("connect %s: refused", raw) },
			"hunter22", "connect postgres://u:xxxxx@h/db: refused"},
		{"secret quoted alone", "postgres://u:hunter22@h/db", func(raw string) error { return errors.New(`password "hunter22" refused`) },
			"hunter22", `password "xxxxx" refused`},
		{"query token", "https://h/x?token=abcdef", func(raw string) error { return fmt.Errorf("Post %q: EOF", raw) },
			"abcdef", `Post "https://h/x?token=xxxxx": EOF`},
		{"url.ParseQuery", "sqlite://x.db?token=ab%zzcd", func(raw string) error { _, err := url.ParseQuery("token=ab%zzcd"); return err },
			"%zz", "invalid URL escape"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := tt.err(tt.raw)
			got := Error(orig, tt.raw)
			if strings.Contains(got.Error(), tt.secret) {
				t.Errorf("Error() = %q, shows %q", got, tt.secret)
			}
			if !strings.Contains(got.Error(), tt.want) {
				t.Errorf("Error() = %q, want it to contain %q", got, tt.want)
			}
			if !errors.Is(got, orig) {
				t.Errorf("the redacted error does not wrap the original")
			}
		})
	}
	if Error(nil, "x") != nil {
		t.Error("Error(nil) != nil")
	}
}

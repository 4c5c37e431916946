package engine

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrNoPermission reports a NOPERM reply: the Redis ACL user lacks a command, a key
// pattern or a channel pattern that seqctl needs. Waiting does not help; the operator
// grants the ACL of the role (SecurityDoc) or uses another user.
var ErrNoPermission = errors.New("engine: the Redis ACL user lacks a permission")

// SecurityDoc documents the ACL user of each role (worker, publisher, read-only and
// acting operator).
const SecurityDoc = "docs/security.md"

var (
	noPermCommand = regexp.MustCompile(`no permissions to run the '([^']+)' command`)
	noPermKey     = regexp.MustCompile(`no permissions to access (?:one of the keys|a key)`)
	noPermChannel = regexp.MustCompile(`no permissions to access (?:one of the channels|a channel)`)
)

// MissingPermission names what a NOPERM reply in err's chain says is missing ("the
// command +evalsha", "a key pattern (~pattern) covering the keys it touched") and returns
// the reply itself; both are "" when err holds no NOPERM reply.
func MissingPermission(err error) (missing, reply string) {
	if err == nil {
		return "", ""
	}
	var re redis.Error
	if errors.As(err, &re) {
		reply = re.Error()
	} else {
		reply = err.Error()
	}
	i := strings.Index(reply, "NOPERM")
	if i < 0 {
		return "", ""
	}
	reply = reply[i:]
	switch {
	case noPermCommand.MatchString(reply):
		missing = "the command +" + strings.ToLower(noPermCommand.FindStringSubmatch(reply)[1])
	case noPermKey.MatchString(reply):
		missing = "a key pattern (~pattern) covering the keys it touched"
	case noPermChannel.MatchString(reply):
		missing = "a channel pattern (&pattern)"
	default:
		missing = "a permission"
	}
	return missing, reply
}

// noPermissionError wraps a NOPERM reply in ErrNoPermission with what is missing and
// where the ACLs are documented; nil when err is no NOPERM reply.
func noPermissionError(err error) error {
	missing, _ := MissingPermission(err)
	if missing == "" {
		return nil
	}
	return fmt.Errorf("%w: %s; grant the ACL of its role as %s shows (%w)", ErrNoPermission, missing, SecurityDoc, err)
}

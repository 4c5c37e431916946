package sqltest

import (
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// RefusingPostgres starts a server that answers every PostgreSQL login with
// "password authentication failed" (SQLSTATE 28P01), as a server does to a wrong
// password, and returns its address. Connect with sslmode=disable.
func RefusingPostgres(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go refuseLogin(c)
		}
	}()
	return ln.Addr().String()
}

func refuseLogin(c net.Conn) {
	defer c.Close()
	b := pgproto3.NewBackend(c, c)
	if _, err := b.ReceiveStartupMessage(); err != nil {
		return
	}
	b.Send(&pgproto3.AuthenticationCleartextPassword{})
	if err := b.Flush(); err != nil {
		return
	}
	b.SetAuthType(pgproto3.AuthTypeCleartextPassword)
	if _, err := b.Receive(); err != nil {
		return
	}
	b.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "28P01", Message: `password authentication failed for user "app"`})
	_ = b.Flush()
}

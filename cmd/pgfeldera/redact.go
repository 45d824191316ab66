package main

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

var kvPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// redactDSN hides the password of a URL or key=value DSN for logging.
func redactDSN(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		if u, err := url.Parse(dsn); err == nil {
			q := u.Query()
			if q.Has("password") {
				q.Set("password", "xxxxx")
				u.RawQuery = q.Encode()
			}
			return u.Redacted()
		}
		return "(unparsable URL)"
	}
	return kvPassword.ReplaceAllString(dsn, "${1}xxxxx")
}

// validateDSN parses the DSN without connecting. Its error never repeats the
// password.
func validateDSN(dsn string) error {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		msg := err.Error()
		if cfg != nil && cfg.Password != "" {
			msg = strings.ReplaceAll(msg, cfg.Password, "xxxxx")
		}
		msg = kvPassword.ReplaceAllString(msg, "${1}xxxxx")
		if u, perr := url.Parse(dsn); perr == nil {
			if pw, ok := u.User.Password(); ok && pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
			}
		}
		return &ConfigError{Msg: fmt.Sprintf("PG_DSN=%q is invalid: %s", redactDSN(dsn), msg)}
	}
	return nil
}

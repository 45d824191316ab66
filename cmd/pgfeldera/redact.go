package main

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// kvPassword matches a key=value DSN's secrets: password and sslpassword
// (the passphrase of the client key), quoted or not.
var kvPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// secretKey reports whether a DSN parameter holds a secret: libpq's
// password and sslpassword.
func secretKey(k string) bool {
	return strings.EqualFold(k, "password") || strings.EqualFold(k, "sslpassword")
}

// redactDSN hides the secrets of a URL or key=value DSN for logging: the
// userinfo password, and password and sslpassword however given.
func redactDSN(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		if u, err := url.Parse(dsn); err == nil {
			q := u.Query()
			hidden := false
			for k := range q {
				if secretKey(k) {
					q[k], hidden = []string{"xxxxx"}, true
				}
			}
			if hidden {
				u.RawQuery = q.Encode()
			}
			return u.Redacted()
		}
		return "(unparsable URL)"
	}
	return kvPassword.ReplaceAllString(dsn, "${1}xxxxx")
}

// dsnSecrets are the secret values a DSN carries, as written and decoded.
func dsnSecrets(dsn string) []string {
	var out []string
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		if pw, ok := u.User.Password(); ok && pw != "" {
			out = append(out, pw)
		}
		for k, vs := range u.Query() {
			if secretKey(k) {
				out = append(out, vs...)
			}
		}
	}
	for _, m := range kvPassword.FindAllStringSubmatch(dsn, -1) {
		out = append(out, m[2], strings.Trim(m[2], "'"))
	}
	return out
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
		for _, s := range dsnSecrets(dsn) {
			if s != "" {
				msg = strings.ReplaceAll(msg, s, "xxxxx")
			}
		}
		return &ConfigError{Msg: fmt.Sprintf("PG_DSN=%q is invalid: %s", redactDSN(dsn), msg)}
	}
	return nil
}

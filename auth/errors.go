package auth

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Error is a refusal with the HTTP status to answer it with.
type Error struct {
	// Code is 401 (credential missing or not valid), 403 (valid, not
	// allowed) or 503 (Nomad could not be asked).
	Code int
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Unauthorized is a missing or invalid credential (401).
func Unauthorized(format string, args ...any) *Error {
	return &Error{Code: http.StatusUnauthorized, Msg: fmt.Sprintf(format, args...)}
}

// Forbidden is a valid credential that does not allow the request (403).
func Forbidden(format string, args ...any) *Error {
	return &Error{Code: http.StatusForbidden, Msg: fmt.Sprintf(format, args...)}
}

// Unavailable is a credential that could not be checked (503).
func Unavailable(format string, args ...any) *Error {
	return &Error{Code: http.StatusServiceUnavailable, Msg: fmt.Sprintf(format, args...)}
}

// Code is the HTTP status of err: an *Error's code, else 500.
func Code(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return http.StatusInternalServerError
}

// TokenHeader is Nomad's header for a token; Authorization: Bearer works too.
const TokenHeader = "X-Nomad-Token"

// RequestToken returns the credential of a request: X-Nomad-Token, else
// the bearer token of the Authorization header; "" when there is none.
func RequestToken(r *http.Request) string {
	if t := strings.TrimSpace(r.Header.Get(TokenHeader)); t != "" {
		return t
	}
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// LooksLikeJWT reports whether a credential has the shape of a compact JWS
// (three dot-separated parts) rather than of an ACL token's secret ID (a
// UUID): workload identities are JWTs.
func LooksLikeJWT(s string) bool {
	return strings.Count(s, ".") == 2 && !strings.ContainsAny(s, " \t")
}

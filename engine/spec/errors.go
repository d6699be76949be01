package spec

import (
	"errors"
	"fmt"
)

// Error codes shared by every layer. handlers/ maps each to one HTTP status.
const (
	EINVALID      = "invalid"       // the input is malformed or out of range
	ENOTFOUND     = "not_found"     // the object does not exist or is not the caller's
	ECONFLICT     = "conflict"      // the object's state does not allow the operation
	EUNAUTHORIZED = "unauthorized"  // no or bad credentials
	EFORBIDDEN    = "forbidden"     // authenticated, but not allowed
	ELIMIT        = "rate_limited"  // too many attempts
	EUNAVAILABLE  = "unavailable"   // a dependency (such as the model endpoint) is not configured
	EINTERNAL     = "internal"      // a bug or an infrastructure failure; details are logged only
	ETOOLARGE     = "too_large"     // the request body is over its limit
	EUNSUPPORTED  = "not_supported" // the request asks for something this server does not do
)

// Error is an application error with a machine-readable code, a message that
// is safe to show to users, optionally the input field it concerns, and
// optionally the underlying cause, which is for logs only.
type Error struct {
	Code    string
	Message string
	Field   string
	// Err is the wrapped cause; it appears in Error() (logs) and through
	// errors.Is/As, never in Message.
	Err error
}

// Error implements the error interface.
func (e *Error) Error() string {
	s := "homework error: code=" + e.Code
	if e.Field != "" {
		s += " field=" + e.Field
	}
	s += " message=" + e.Message
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the cause, if any.
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// FieldError returns an EINVALID *Error about one input field.
func FieldError(field, format string, args ...any) *Error {
	return &Error{Code: EINVALID, Field: field, Message: fmt.Sprintf(format, args...)}
}

// WrapError returns an *Error with the given code and user-safe message that
// keeps cause for logs.
func WrapError(cause error, code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Err: cause}
}

// ErrorCode returns the code of the *Error in err's chain, EINTERNAL for any
// other non-nil error and "" for nil.
func ErrorCode(err error) string {
	var e *Error
	if err == nil {
		return ""
	} else if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the user-safe message of the *Error in err's chain, or
// a generic text for any other error so internals never leak.
func ErrorMessage(err error) string {
	var e *Error
	if err == nil {
		return ""
	} else if errors.As(err, &e) {
		return e.Message
	}
	return "Internal error."
}

// ErrorField returns the field of the *Error in err's chain, if any.
func ErrorField(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Field
	}
	return ""
}

package handlers

import (
	"errors"

	"homework/engine/spec"

	"github.com/gofiber/fiber/v2"
)

// statusOf is the one table from error code to HTTP status.
var statusOf = map[string]int{
	spec.EINVALID:      fiber.StatusBadRequest,
	spec.ENOTFOUND:     fiber.StatusNotFound,
	spec.ECONFLICT:     fiber.StatusConflict,
	spec.EUNAUTHORIZED: fiber.StatusUnauthorized,
	spec.EFORBIDDEN:    fiber.StatusForbidden,
	spec.ELIMIT:        fiber.StatusTooManyRequests,
	spec.EUNAVAILABLE:  fiber.StatusServiceUnavailable,
	spec.ETOOLARGE:     fiber.StatusRequestEntityTooLarge,
	spec.EUNSUPPORTED:  fiber.StatusNotAcceptable,
	spec.EINTERNAL:     fiber.StatusInternalServerError,
}

// HTTPStatus returns the HTTP status for err's code.
func HTTPStatus(err error) int {
	if s, ok := statusOf[spec.ErrorCode(err)]; ok {
		return s
	}
	return fiber.StatusInternalServerError
}

// ErrorBody is the JSON error shape of the API.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inner error object.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

// jsonError writes err as the API's JSON error. Internal errors are logged
// and shown only as a generic message.
func (s *Server) jsonError(c *fiber.Ctx, err error) error {
	code := spec.ErrorCode(err)
	var fe *fiber.Error
	if errors.As(err, &fe) {
		return c.Status(fe.Code).JSON(ErrorBody{Error: ErrorDetail{Code: fiberCode(fe.Code), Message: fe.Message}})
	}
	if code == spec.EINTERNAL {
		s.log.Error("internal error", "method", c.Method(), "path", c.Path(), "err", err)
	}
	return c.Status(HTTPStatus(err)).JSON(ErrorBody{Error: ErrorDetail{Code: code, Message: spec.ErrorMessage(err), Field: spec.ErrorField(err)}})
}

func fiberCode(status int) string {
	for code, st := range statusOf {
		if st == status {
			return code
		}
	}
	switch status {
	case fiber.StatusMethodNotAllowed:
		return "method_not_allowed"
	case fiber.StatusUnsupportedMediaType:
		return "unsupported_media_type"
	}
	if status >= 500 {
		return spec.EINTERNAL
	}
	return spec.EINVALID
}

// errorHandler is Fiber's last-resort handler: JSON for the API, a plain
// readable page otherwise; never a stack or SQL text.
func (s *Server) errorHandler(c *fiber.Ctx, err error) error {
	var fe *fiber.Error
	status := HTTPStatus(err)
	msg := spec.ErrorMessage(err)
	if errors.As(err, &fe) {
		status, msg = fe.Code, fe.Message
	} else if spec.ErrorCode(err) == spec.EINTERNAL {
		s.log.Error("unhandled error", "method", c.Method(), "path", c.Path(), "err", err)
	}
	// A request refused before it was read to its end leaves input on the
	// connection, which fasthttp closes after this answer: linger, so the
	// client reads the answer rather than a reset.
	if status == fiber.StatusRequestHeaderFieldsTooLarge || status == fiber.StatusRequestEntityTooLarge {
		lingerOnClose(c.Context().Conn())
	}
	// A request whose headers were too large was never parsed: its path is
	// unknown, so it gets the API's JSON shape, which any client can read.
	if isAPI(c) || status == fiber.StatusRequestHeaderFieldsTooLarge {
		if fe != nil {
			return c.Status(status).JSON(ErrorBody{Error: ErrorDetail{Code: fiberCode(status), Message: msg}})
		}
		return s.jsonError(c, err)
	}
	return s.renderError(c, status, msg)
}

func isAPI(c *fiber.Ctx) bool {
	p := c.Path()
	return len(p) >= 5 && p[:5] == "/api/" || p == "/api" || p == "/healthz"
}

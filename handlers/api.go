package handlers

import "github.com/gofiber/fiber/v2"

// apiRoutes registers the JSON API under /api (already authenticated).
func (s *Server) apiRoutes(api fiber.Router) {
	api.Get("/me", func(c *fiber.Ctx) error {
		u := userOf(c)
		return c.JSON(fiber.Map{"id": u.ID, "email": u.Email, "is_admin": u.IsAdmin})
	})
}

package handlers

import (
	"github.com/gofiber/fiber/v2"

	"homework/views"
)

// pageRoutes registers the HTML pages.
func (s *Server) pageRoutes(app *fiber.App) {
	app.Get("/", func(c *fiber.Ctx) error {
		if err := s.authenticate(c); err != nil {
			c.Locals(localUser, nil)
		}
		return s.render(c, fiber.StatusOK, views.Home(s.page(c, "Runs")))
	})
}

// Command eventsgen writes the browser's lists of event types from the
// vocabulary's (spec.Events): views/events_gen.go and
// static/js/events.gen.js. go generate runs it in views/.
package main

import (
	"log"
	"os"
	"path/filepath"

	"homework/views"
)

func main() {
	log.SetFlags(0)
	src, err := views.EventListsGo()
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("events_gen.go", src, 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("..", "static", "js", "events.gen.js"), views.EventListsJS(), 0o644); err != nil {
		log.Fatal(err)
	}
}
